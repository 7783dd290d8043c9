"""CountBench and PairTally read from generated fixtures in their published layouts; the CountBench task's metrics."""

import json

import numpy as np
import pandas as pd
import pytest

from countboard.counting.datasets.countbench import CountBenchDataset, question_noun
from countboard.counting.datasets.pairtally import PairTallyDataset
from countboard.counting.tasks.countbench import CountBenchCounting
from countboard.errors import ConfigError, DataNotFoundError
from countboard.metrics.counting import accuracy_per_number, exact_count_accuracy
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


def test_exact_accuracy_and_per_number_against_a_direct_loop():
    rng = np.random.default_rng(0)
    gt = rng.integers(2, 11, 200).astype(float)
    pred = gt + rng.normal(0, 0.8, 200)
    direct = sum(round(p) == g for p, g in zip(pred, gt, strict=True)) / len(gt)  # round half to even, as np.rint
    assert exact_count_accuracy(pred, gt) == pytest.approx(direct)
    rows = accuracy_per_number(pred, gt)
    assert [r["number"] for r in rows] == sorted(set(gt.astype(int)))
    for r in rows:
        sel = [k for k in range(len(gt)) if gt[k] == r["number"]]
        assert r["n_images"] == len(sel)
        assert r["exact_acc"] == pytest.approx(sum(round(pred[k]) == gt[k] for k in sel) / len(sel))
        assert r["mae"] == pytest.approx(np.mean([abs(pred[k] - gt[k]) for k in sel]))


def test_countbench_task_adds_exact_accuracy_and_the_per_number_table():
    records = pd.DataFrame({"unit_id": list("abcd"), "image_id": list("abcd"), "class_name": ["x"] * 4,
                            "gt": [2, 2, 3, 5], "count": [2.2, 1.0, 3.0, 9.0]})
    result = CountBenchCounting().summarize(records, None, None, None)
    assert result.metrics["exact_acc"] == 0.5
    assert result.metrics["mae"] == pytest.approx((0.2 + 1.0 + 0.0 + 4.0) / 4)
    table = result.tables["accuracy_per_number"]
    assert table["number"].tolist() == [2, 3, 5] and table["exact_acc"].tolist() == [0.5, 1.0, 0.0]


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
