"""CountBench and PairTally read from generated fixtures in their published layouts; the CountBench task's metrics."""

import json

import numpy as np
import pandas as pd
import pytest

from countboard.counting.datasets.countbench import CountBenchDataset, question_noun
from countboard.counting.datasets.pairtally import PairTallyDataset
from countboard.counting.tasks.countbench import CountBenchCounting
from countboard.errors import ConfigError, DataNotFoundError
from countboard.metrics.counting import error_per_number
from tests.fixtures.count_datasets import NOUNS, PAIRS, write_countbench, write_pairtally


def test_countbench_reads_the_hub_layout(tmp_path):
    ds = CountBenchDataset(write_countbench(tmp_path, n=10))
    assert len(ds) == 10 and ds.image_ids[0] == "countbench_000"
    assert [ds.class_of(i) for i in ds.image_ids[:4]] == NOUNS
    assert [ds.count_of(i) for i in ds.image_ids] == [2, 3, 4, 5, 6, 7, 8, 9, 10, 2]
    item = ds.load("countbench_003")
    assert item.image.shape == (48, 64, 3) and item.class_name == "cats"
    assert ds.question_of("countbench_001") == "How many blue squares are there in the image?"
    assert len(CountBenchDataset(tmp_path, max_images=3)) == 3


def test_countbench_missing_or_foreign_files_are_one_line_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"vikhyatk/CountBenchQA"):
        CountBenchDataset(tmp_path / "nowhere")
    (tmp_path / "data").mkdir()
    pd.DataFrame({"image": [b""], "answer": [3]}).to_parquet(tmp_path / "data" / "x.parquet")
    with pytest.raises(ConfigError, match=r"columns \['question', 'number'\] are missing"):
        CountBenchDataset(tmp_path)


def test_question_noun():
    assert question_noun("How many coffee cups are in the picture?") == "coffee cups"
    assert question_noun("how many dog is there?") == "dog"
    assert question_noun("What number of cats?") is None


def test_error_per_number_against_a_direct_loop():
    rng = np.random.default_rng(0)
    gt = rng.integers(2, 11, 200).astype(float)
    pred = gt + rng.normal(0, 0.8, 200)
    rows = error_per_number(pred, gt)
    assert [r["number"] for r in rows] == sorted(set(gt.astype(int)))
    for r in rows:
        sel = [k for k in range(len(gt)) if gt[k] == r["number"]]
        assert r["n_images"] == len(sel)
        assert r["mae"] == pytest.approx(np.mean([abs(pred[k] - gt[k]) for k in sel]))


def test_countbench_task_is_the_classic_test_with_the_error_per_number():
    records = pd.DataFrame({"unit_id": list("abcd"), "image_id": list("abcd"), "class_name": ["x"] * 4,
                            "gt": [2, 2, 3, 5], "count": [2.2, 1.0, 3.0, 9.0]})
    result = CountBenchCounting().summarize(records, None, None, None)
    assert result.metrics["exact_accuracy"] == 0.5  # 2.2 -> 2 and 3.0 are right
    assert result.metrics["mae"] == pytest.approx((0.2 + 1.0 + 0.0 + 4.0) / 4)
    by_number = result.tables["accuracy_by_number"]
    assert by_number["number"].tolist() == [2, 3, 5] and by_number["accuracy"].tolist() == [0.5, 1.0, 0.0]
    errors = result.tables["error_by_number"]
    assert errors["number"].tolist() == [2, 3, 5] and errors["mae"].tolist() == pytest.approx([0.6, 0.0, 4.0])


def test_pairtally_reads_the_released_layout(tmp_path, caplog):
    root = write_pairtally(tmp_path, n=8)
    ds = PairTallyDataset(root)
    assert ds.left_out == 2 and len(ds) == 6  # the two images whose prompts are one text
    assert "2 of 8 images have one prompt for both classes" in caplog.text
    assert ds.classes == ["pasta", "dice", "coin", "button", "red chip", "blue chip"]
    ann = json.loads((root / "annotations" / "pairtally_annotations_simple.json").read_text())
    first = ds.image_ids[0]
    counts = ds.counts_of(first)
    assert counts["pasta"] == len(ann[first]["points"]) and counts["dice"] == len(ann[first]["negative_points"])
    assert sum(counts.values()) == counts["pasta"] + counts["dice"]
    item = ds.load(first)
    assert item.class_name == "pasta" == ds.class_of(first) and ds.count_of(first) == counts["pasta"]
    assert {k: len(v) for k, v in item.points.items()} == {"pasta": counts["pasta"], "dice": counts["dice"]}
    assert set(PAIRS[0]) <= set(ds.classes)


def test_pairtally_missing_pieces_are_one_line_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"pairtally_annotations_simple.json.*PairTally_Benchmark"):
        PairTallyDataset(tmp_path)
    root = write_pairtally(tmp_path, n=4)
    with pytest.raises(DataNotFoundError, match="pairtally_annotations_inter_augmented.json"):
        PairTallyDataset(root, prompts="augmented", subset="inter")
    with pytest.raises(ConfigError, match="split 'val' is not in"):
        PairTallyDataset(root, split="val")
    with pytest.raises(ConfigError, match="use prompts in"):
        PairTallyDataset(root, prompts="long")
    (root / "images" / PairTallyDataset(root).image_ids[0]).unlink()
    with pytest.raises(DataNotFoundError, match="1 of the 3 images are missing"):
        PairTallyDataset(root)
