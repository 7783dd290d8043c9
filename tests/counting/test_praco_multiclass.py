"""PrACo++ multi-class: the loader on the real metadata (placeholder images), the synthetic set, the task."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from countboard.counting.datasets import praco_multiclass as pm
from countboard.counting.models.class_blind import ClassBlindCounter
from countboard.counting.models.oracle import OracleCounter
from countboard.counting.tasks.praco_multiclass import PracoMulticlass
from countboard.errors import ConfigError, DataNotFoundError
from countboard.metrics.praco_multiclass import multiclass_metrics
from countboard.results import RunContext

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "praco_multiclass"


@pytest.fixture
def ctx(tmp_path):
    return RunContext(device="cpu", seed=0, batch_size=4, work_dir=tmp_path, progress=False)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    return pm.SyntheticMulticlass(tmp_path_factory.mktemp("mc") / "syn", n_images=8, n_classes=4)


def run(task, model, dataset, ctx):
    records = task.run_units(model, dataset, task.units(model, dataset, ctx), ctx)
    return task.summarize(pd.DataFrame([r for r in records if "error" not in r]), model, dataset, ctx)


def test_real_metadata_with_placeholder_images(tmp_path):
    if not SHARED.is_dir():
        pytest.skip(f"PrACo++ metadata not found at {SHARED}")
    root = tmp_path / "mc"
    shutil.copytree(SHARED, root)
    with pytest.raises(DataNotFoundError, match="200 of the 200 images are missing"):
        pm.PracoMulticlassDataset(root)
    ds = pm.PracoMulticlassDataset(root, max_images=6, check_files=False)
    (root / "images").mkdir()
    sizes = json.loads((root / "annotations.json").read_text())
    for i in ds.image_ids:  # of the annotations' size: a point outside the image would fail it
        Image.new("RGB", (int(sizes[i]["W"]), int(sizes[i]["H"]))).save(root / "images" / i)
    ds = pm.PracoMulticlassDataset(root, max_images=6)
    assert len(ds.classes) == 45 and ds.image_ids[0] == "mcac_1.jpg"
    assert {c: n for c, n in ds.counts_of("mcac_1.jpg").items() if n} == {"plates": 7, "bowls": 13}
    assert ds.class_of("mcac_1.jpg") == "bowls" and ds.count_of("mcac_1.jpg") == 13
    item = ds.load("mcac_1.jpg")
    assert {c: len(p) for c, p in item.points.items()} == {"plates": 7, "bowls": 13}
    totals = json.loads((root / "multiclass_gt_counts.json").read_text())
    full = pm.PracoMulticlassDataset(root, check_files=False)
    assert len(full) == 200
    assert all(sum(full.counts_of(i).values()) == totals[i] for i in full.image_ids)
    result = run(PracoMulticlass(), OracleCounter(), ds, RunContext("cpu", 0, 2, tmp_path, False))
    assert result.metrics["mc_nmn_macro"] == 0.0 and result.metrics["mc_pccn_avg_gt"] == 100.0


def test_inconsistent_counts_are_refused(tmp_path, synthetic):
    root = tmp_path / "bad"
    shutil.copytree(synthetic.root, root)
    counts = json.loads((root / pm.CLASS_COUNTS).read_text())
    first = next(iter(counts))
    cls = next(c for c, n in counts[first].items() if n)
    counts[first][cls] += 1
    (root / pm.CLASS_COUNTS).write_text(json.dumps(counts))
    with pytest.raises(ConfigError, match="differ from its points"):
        pm.PracoMulticlassDataset(root)


def test_oracle_is_perfect(synthetic, ctx):
    result = run(PracoMulticlass(), OracleCounter(), synthetic, ctx)
    m = result.metrics
    assert (m["mc_mnp_macro"], m["mc_mnp_micro"], m["mc_nmn_macro"], m["mc_nmn_micro"]) == (0, 0, 0, 0)
    assert m["mc_pccn_one_at_a_time"] == 100.0 and m["mc_pccn_avg_gt"] == 100.0
    assert m["mc_mae_macro"] == 0.0 and m["mc_rmse_micro"] == 0.0
    assert result.tables["multiclass_counts"].shape == (8, 1 + 4)
    # the oracle's maps are the annotated points: every localized value is perfect, on every grid
    for n in (4, 16, 64):
        assert m[f"mc_localized_mae_macro_div{n}"] == pytest.approx(0.0, abs=1e-9)
        for what in ("recall", "precision", "fscore"):
            assert m[f"mc_localized_{what}_micro_div{n}"] == pytest.approx(1.0), (what, n)
    assert m["official_mc_mnp_macro"] == 0.0 and m["official_mc_pccn_avg_gt"] == 100.0


def test_all_class_images_convention_and_kept_maps(synthetic, ctx):
    """The authors' divisor when asked (official_mc_* always), and every predicted map kept, summing to its count."""
    left = run(PracoMulticlass(), ClassBlindCounter(), synthetic, ctx)
    counted = run(PracoMulticlass(all_class_images="count", keep_maps=True), ClassBlindCounter(), synthetic, ctx)
    for key in ("mc_mnp_macro", "mc_nmn_macro", "mc_pccn_one_at_a_time", "mc_pccn_avg_gt"):
        assert counted.metrics[key] == pytest.approx(counted.metrics[f"official_{key}"])
        assert left.metrics[f"official_{key}"] == pytest.approx(counted.metrics[f"official_{key}"])
    assert left.tags["praco.all_class_images"] == "leave_out"
    final = pd.read_csv(counted.files["multiclass_final_metrics_test.csv"], index_col=0)
    assert final["MNP_macro"].iloc[0] == pytest.approx(round(counted.metrics["official_mc_mnp_macro"], 3))
    maps = counted.arrays["density_maps"]
    first = synthetic.image_ids[0]
    stem = Path(first).stem
    assert {f"{stem}_{c}" for c in synthetic.classes} <= set(maps)
    assert float(maps[f"{stem}_{synthetic.classes[0]}"].sum()) == pytest.approx(
        counted.tables["multiclass_counts"].iloc[0][synthetic.classes[0]], rel=1e-5)
    with pytest.raises(ConfigError, match="all_class_images"):
        PracoMulticlass(all_class_images="sometimes")


def _hand(gt: np.ndarray) -> dict[str, float]:
    """class_blind predicts each image's total for every prompt: the metrics written out image by image."""
    per = {"mnp": [], "nmn": [], "mae": [], "rmse": [], "one": [], "avg": []}
    pooled = {"neg": 0.0, "n_neg": 0, "den": 0.0, "abs": 0.0, "sq": 0.0, "n_pos": 0}
    for row in gt:
        total = float(sum(row))
        pos = [g for g in row if g > 0]
        n_neg = len(row) - len(pos)
        errors = [total - g for g in pos]
        per["mae"].append(sum(abs(e) for e in errors) / len(pos))
        per["rmse"].append(math.sqrt(sum(e * e for e in errors) / len(pos)))
        pooled["abs"] += sum(abs(e) for e in errors)
        pooled["sq"] += sum(e * e for e in errors)
        pooled["n_pos"] += len(pos)
        if n_neg:
            per["mnp"].append(total)
            per["nmn"].append(1.0)
            pooled["neg"] += total * n_neg
            pooled["n_neg"] += n_neg
            pooled["den"] += n_neg * total
            d_pos = per["mae"][-1]
            per["one"].append(d_pos < sum(abs(g - total) for g in pos) / len(pos))
            per["avg"].append(d_pos < abs(total / len(pos) - total))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {"mc_mnp_macro": mean(per["mnp"]), "mc_mnp_micro": pooled["neg"] / pooled["n_neg"],
            "mc_nmn_macro": mean(per["nmn"]), "mc_nmn_micro": pooled["neg"] / pooled["den"],
            "mc_mae_macro": mean(per["mae"]), "mc_mae_micro": pooled["abs"] / pooled["n_pos"],
            "mc_rmse_macro": mean(per["rmse"]), "mc_rmse_micro": math.sqrt(pooled["sq"] / pooled["n_pos"]),
            "mc_pccn_one_at_a_time": 100 * mean(per["one"]), "mc_pccn_avg_gt": 100 * mean(per["avg"])}


def test_class_blind_matches_the_hand_computation(synthetic, ctx):
    result = run(PracoMulticlass(), ClassBlindCounter(), synthetic, ctx)
    gt = np.array([[synthetic.counts_of(i)[c] for c in synthetic.classes] for i in synthetic.image_ids])
    expected = _hand(gt)
    for key, value in expected.items():
        assert result.metrics[key] == pytest.approx(value), key
    assert result.metrics["mc_nmn_macro"] == pytest.approx(1.0)


def test_metrics_by_hand_and_edge_cases():
    pred = [[2.0, 1.0, 4.0], [0.0, 0.0, 0.0], [5.0, 5.0, 5.0]]
    gt = [[2, 0, 3], [0, 0, 0], [1, 2, 3]]   # image 2: no gt at all; image 3: no negative class
    m = multiclass_metrics(pred, gt)
    assert m["mc_n_images"] == 2
    assert m["mc_mnp_macro"] == 1.0 and m["mc_nmn_macro"] == pytest.approx(1 / 5)
    assert m["mc_mae_macro"] == pytest.approx((0.5 + 3) / 2)
    assert m["mc_mae_micro"] == pytest.approx((0 + 1 + 4 + 3 + 2) / 5)
    assert m["mc_rmse_micro"] == pytest.approx(math.sqrt((0 + 1 + 16 + 9 + 4) / 5))
    # image 1: d_pos 0.5; one at a time: (|2-1| + |3-1|) / 2 = 1.5; avg GT: |2.5 - 1| = 1.5 -> both nearer
    assert m["mc_pccn_one_at_a_time"] == 100.0 and m["mc_pccn_avg_gt"] == 100.0
    with pytest.raises(ValueError, match="must both be"):
        multiclass_metrics([[1.0]], [[1, 2]])


def test_single_class_dataset_is_refused(ctx, tmp_path):
    from countboard.counting.datasets.synthetic_shapes import SyntheticShapes

    shapes = SyntheticShapes(tmp_path / "s", image_size=(32, 32), size_range=(4.0, 6.0), count_range=(1, 3),
                             images_per_class={"train": 0, "val": 0, "test": 1}, multi_class_images=0,
                             n_classes=2)
    with pytest.raises(ConfigError, match="multi-class dataset"):
        PracoMulticlass().units(None, shapes, ctx)
