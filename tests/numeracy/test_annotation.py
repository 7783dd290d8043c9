"""Annotation back end: items, resumable DuckDB store, GeckoNum-layout export, logging to the run."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from countboard.numeracy.annotation import (
    LabelStore,
    annotation_items,
    load_run_sample,
    log_labels,
    read_annotation_images,
)
from countboard.numeracy.datasets.prompts import generate_prompts, specs_frame
from countboard.numeracy.release import TASK_COLUMNS, read_annotations
from countboard.numeracy.scoring import score_annotations


@pytest.fixture
def sample() -> pd.DataFrame:
    specs = generate_prompts(
        ["numeric_simple", "2-additive"], n_per_type=3, nouns=["red circle", "blue square"]
    )
    return pd.DataFrame(
        {
            "image_id": [f"geckonum_{s.prompt_id:05d}_0" for s in specs],
            "prompt_id": [s.prompt_id for s in specs],
            "seed": 0,
            "prompt": [s.prompt for s in specs],
            "prompt_type": [s.prompt_type for s in specs],
            "nouns": [json.dumps([e.noun for e in s.entities]) for s in specs],
            "questions": [json.dumps(s.questions()) for s in specs],
        }
    ), specs


def test_items_expand_questions_of_a_seeded_subset(sample):
    table, specs = sample
    items = annotation_items(table, n=None)
    assert len(items) == 3 * 1 + 3 * 2
    assert set(items["image_id"]) == set(table["image_id"])
    two = items[items["image_id"] == "geckonum_00003_0"]
    assert two["question_id"].tolist() == [0, 1]
    assert two["question"].tolist() == specs[3].questions()
    subset = annotation_items(table, n=2, seed=5)
    assert subset["image_id"].nunique() == 2
    assert subset.equals(annotation_items(table, n=2, seed=5))
    assert annotation_items(table.iloc[:0]).empty


def test_store_is_resumable_and_exports_the_geckonum_layout(sample, tmp_path):
    table, specs = sample
    items = annotation_items(table, n=None)
    path = tmp_path / "labels.duckdb"
    store = LabelStore(path)
    assert store.add("r1", "procedural_good", items.iloc[0], "ann", "2-3") == 2.5
    with pytest.raises(ValueError, match="cannot read 'lots'"):
        store.add("r1", "procedural_good", items.iloc[1], "ann", "lots")
    store.add("r1", "procedural_good", items.iloc[1], "ann", "10+")
    # A new session (new object, same file) resumes after the answered items.
    again = LabelStore(path)
    assert again.progress("r1", "ann", items) == (2, len(items))
    assert again.remaining("r1", "ann", items)["image_id"].tolist() == items["image_id"].iloc[2:].tolist()
    assert len(again.remaining("r1", "other", items)) == len(items)
    again.add("r1", "procedural_good", items.iloc[0], "ann", "3")  # a corrected answer replaces the first one
    labels = again.labels("r1")
    assert len(labels) == 2 and sorted(labels["answer"]) == [3.0, 11.0]
    for i in range(2, len(items)):
        again.add("r1", "procedural_good", items.iloc[i], "ann", "1")
    csv = again.export("r1", tmp_path / "export")
    assert csv.name == "task_1_procedural_good.csv"
    assert pd.read_csv(csv).columns.tolist() == list(TASK_COLUMNS[1])
    ann = read_annotations(tmp_path / "export", 1)
    scored = score_annotations(ann, specs_frame(specs), 1, generators=["procedural_good"])
    assert not scored.problems and len(scored.units) == len(items)
    answers = [3.0, 11.0] + [1.0] * (len(items) - 2)
    expected = {
        (row.image_id, row.question): specs[int(row.image_id.split("_")[1])].counts[row.noun] == a
        for row, a in zip(items.itertuples(), answers, strict=True)
    }
    got = scored.units.set_index(["image_id", "question"])["correct"].to_dict()
    assert got == expected and any(expected.values())
    with pytest.raises(ValueError, match="no answers stored for run r2"):
        again.export("r2", tmp_path)


def test_labels_and_sample_go_through_the_tracker(sample, tmp_path):
    from countboard.tracking.store import open_store

    table, _ = sample
    tracker = open_store(str(tmp_path / "store"), create=True)
    exp = tracker.experiment_id("countboard")
    run_id = tracker.create_run(exp, "gen", {"model": "procedural_good"})
    art = tmp_path / "art"
    (art / "tables").mkdir(parents=True)
    (art / "files").mkdir()
    table.to_parquet(art / "tables" / "annotation_sample.parquet", index=False)
    with zipfile.ZipFile(art / "files" / "annotation_images.zip", "w") as zf:
        for image_id in table["image_id"]:
            buf = io.BytesIO()
            Image.fromarray(np.full((8, 8, 3), 7, np.uint8)).save(buf, format="PNG")
            zf.writestr(f"{image_id}.png", buf.getvalue())
    tracker.log_dir(run_id, art)
    got, zip_path = load_run_sample(tracker, run_id, tmp_path / "dl")
    assert got.equals(table)
    images = read_annotation_images(zip_path)
    assert sorted(images) == sorted(table["image_id"]) and images[table["image_id"][0]].shape == (8, 8, 3)
    store = LabelStore(tmp_path / "labels.duckdb")
    store.add(run_id, "procedural_good", annotation_items(table).iloc[0], "ann", "4")
    logged = log_labels(tracker, run_id, store)
    assert str(logged) == "annotations/task_1_procedural_good.csv"
    assert tracker.list_artifacts(run_id, "annotations") == ["annotations/task_1_procedural_good.csv"]
    from countboard.tracking.manifest import (
        MANIFEST_TAG,  # the run's manifest names the new file for the index
    )

    assert "annotations/task_1_procedural_good.csv" in tracker.client.get_run(run_id).data.tags[MANIFEST_TAG]
