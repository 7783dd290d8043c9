"""FSC-147 loader on the real metadata (splits, classes, counts) with placeholder images for a subset."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from countboard.counting.datasets import fsc147
from countboard.counting.datasets.fsc147 import FSC147Dataset
from countboard.counting.models.oracle import OracleCounter
from countboard.counting.tasks.praco import PracoNegative
from countboard.errors import ConfigError, DataNotFoundError
from countboard.results import RunContext

PER_CLASS = 2


def _shared_meta() -> Path:
    here = Path(__file__).resolve()
    path = here.parents[2].parent / "shared" / "data" / "fsc147_meta"
    if not path.is_dir():
        pytest.skip(f"FSC-147 metadata not found at {path}")
    return path


@pytest.fixture(scope="module")
def fsc_root(tmp_path_factory) -> Path:
    """The real metadata plus an annotation file with ``gt`` random points per test image and placeholder JPEGs
    for the first ``PER_CLASS`` test images of each class."""
    meta = _shared_meta()
    root = tmp_path_factory.mktemp("fsc") / "FSC147_384_V2"
    root.mkdir()
    for name in (fsc147.CLASSES_FILE, fsc147.SPLITS_FILE, fsc147.SPLIT_CLASSES_FILE):
        shutil.copy(meta / name, root / name)
    counts = json.loads((meta / "gt_cnts_FSC147.json").read_text())
    rng = np.random.default_rng(0)
    annotations = {}
    for image_id, n in counts.items():
        pts = np.column_stack([rng.uniform(0, 512, n), rng.uniform(0, 384, n)])
        annotations[image_id] = {"H": 384, "W": 512, "points": pts.round(1).tolist(),
                                 "box_examples_coordinates": [[[10, 20], [10, 40], [30, 40], [30, 20]]] * 3}
    (root / fsc147.ANNOTATION_FILE).write_text(json.dumps(annotations))
    classes = fsc147.read_class_file(root / fsc147.CLASSES_FILE)
    test_ids = json.loads((root / fsc147.SPLITS_FILE).read_text())["test"]
    (root / fsc147.IMAGE_DIR).mkdir()
    seen: dict[str, int] = {}
    placeholder = Image.new("RGB", (512, 384), (120, 110, 100))  # the annotations' W x H
    excluded = fsc147.read_exclusion(fsc147.PRACO_EXCLUSION, root)
    for image_id in test_ids:
        if fsc147.image_stem(image_id) in excluded:
            continue
        if seen.get(classes[image_id], 0) < PER_CLASS:
            placeholder.save(root / fsc147.IMAGE_DIR / image_id)
            seen[classes[image_id]] = seen.get(classes[image_id], 0) + 1
    return root


def test_real_metadata_splits_and_classes():
    meta = _shared_meta()
    splits = json.loads((meta / fsc147.SPLITS_FILE).read_text())
    split_classes = json.loads((meta / fsc147.SPLIT_CLASSES_FILE).read_text())
    classes = fsc147.read_class_file(meta / fsc147.CLASSES_FILE)
    assert {k: len(v) for k, v in split_classes.items()} == {"train": 89, "val": 29, "test": 29}
    assert {k: len(splits[k]) for k in ("train", "val", "test")} == {"train": 3659, "val": 1286, "test": 1190}
    for split in ("train", "val", "test"):
        assert {classes[i] for i in splits[split]} == set(split_classes[split])
    assert not set(split_classes["train"]) & set(split_classes["test"])


def test_subset_loads_with_counts(fsc_root):
    ds = FSC147Dataset(fsc_root, split="test", images_per_class=PER_CLASS)
    split_classes = json.loads((fsc_root / fsc147.SPLIT_CLASSES_FILE).read_text())["test"]
    assert ds.classes == split_classes
    assert len(ds) == 29 * PER_CLASS
    counts = json.loads((_shared_meta() / "gt_cnts_FSC147.json").read_text())
    assert [ds.count_of(i) for i in ds.image_ids] == [counts[i] for i in ds.image_ids]
    item = ds[0]
    assert item.image.shape == (384, 512, 3)
    assert item.count_of() == counts[item.image_id]
    np.testing.assert_array_equal(item.boxes[item.class_name], [[20, 10, 40, 30]] * 3)
    assert all(len(ds.images_of(c)) == PER_CLASS for c in ds.classes)


def test_full_split_without_images_names_what_is_missing(fsc_root):
    with pytest.raises(DataNotFoundError) as err:
        FSC147Dataset(fsc_root, split="test")
    msg = str(err.value)
    assert f"{1190 - 38 - 29 * PER_CLASS} of the {1190 - 38} images" in msg   # the PrACo list is left out
    assert "images_384_VarV2" in msg and "LearningToCountEverything" in msg


def test_missing_metadata_and_root(tmp_path, fsc_root):
    with pytest.raises(DataNotFoundError, match="FSC147_384_V2.zip"):
        FSC147Dataset(tmp_path / "nowhere")
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(fsc_root / fsc147.SPLITS_FILE, partial / fsc147.SPLITS_FILE)
    with pytest.raises(DataNotFoundError, match="Missing annotation_FSC147_384.json"):
        FSC147Dataset(partial)


def test_split_errors(fsc_root):
    with pytest.raises(ConfigError, match="one of"):
        FSC147Dataset(fsc_root, split="holdout")
    with pytest.raises(ConfigError, match="without annotation"):
        FSC147Dataset(fsc_root, split="val", check_files=False)


def test_exclusion_list(fsc_root, tmp_path):
    full = FSC147Dataset(fsc_root, split="test", images_per_class=PER_CLASS)
    dropped = full.image_ids[:3]
    (tmp_path / "multi.txt").write_text("# multi-class images\n" + "\n".join(dropped) + "\n")
    ds = FSC147Dataset(fsc_root, split="test", images_per_class=PER_CLASS, exclude=tmp_path / "multi.txt",
                       check_files=False)
    assert not set(dropped) & set(ds.image_ids)
    assert len(ds) == len(full)
    listed = FSC147Dataset(fsc_root, split="test", images_per_class=1, exclude=dropped[:1], max_images=5)
    assert len(listed) == 5 and dropped[0] not in listed.image_ids
    with pytest.raises(DataNotFoundError, match="dataset.exclude"):
        FSC147Dataset(fsc_root, split="test", exclude="no_such_file.txt")


def test_negative_test_on_the_subset(fsc_root, tmp_path):
    ds = FSC147Dataset(fsc_root, split="test", images_per_class=1)
    ctx = RunContext(device="cpu", seed=0, batch_size=8, work_dir=tmp_path, progress=False)
    task = PracoNegative()
    records = task.run_units(OracleCounter(), ds, task.units(None, ds, ctx), ctx)
    result = task.summarize(pd.DataFrame(records), OracleCounter(), ds, ctx)
    assert result.metrics["nmn"] == 0.0 and result.metrics["pccn"] == 100.0
    assert result.tables["negative_counts"].shape == (29, 3 + 29)


def test_praco_exclusion_list_is_the_default(fsc_root):
    ds = FSC147Dataset(fsc_root, split="test", check_files=False)
    everything = FSC147Dataset(fsc_root, split="test", exclude=None, check_files=False)
    stems = {line.strip() for line in fsc147.PRACO_EXCLUSION_FILE.read_text().splitlines() if line.strip()}
    assert len(stems) == 38 and all(not s.endswith(".jpg") for s in stems)
    assert len(everything) - len(ds) == 38
    assert not {fsc147.image_stem(i) for i in ds.image_ids} & stems
    # ids with or without .jpg
    some = everything.image_ids[:2]
    mixed = FSC147Dataset(fsc_root, split="test", exclude=[some[0], fsc147.image_stem(some[1])], check_files=False)
    assert len(mixed) == len(everything) - 2


def test_image_without_points_uses_gt_cnts_or_is_refused(fsc_root, tmp_path):
    root = tmp_path / "fsc"
    shutil.copytree(fsc_root, root)
    ds = FSC147Dataset(root, split="test", check_files=False)
    target = ds.image_ids[0]
    annotations = json.loads((root / fsc147.ANNOTATION_FILE).read_text())
    del annotations[target]["points"]
    (root / fsc147.ANNOTATION_FILE).write_text(json.dumps(annotations))
    with pytest.raises(ConfigError, match=f"no `points`.*{target}"):
        FSC147Dataset(root, split="test", check_files=False)
    shutil.copy(_shared_meta() / fsc147.GT_COUNTS_FILE, root / fsc147.GT_COUNTS_FILE)
    counts = json.loads((root / fsc147.GT_COUNTS_FILE).read_text())
    assert FSC147Dataset(root, split="test", check_files=False).count_of(target) == counts[target] > 0
