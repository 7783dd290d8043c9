"""PrACo++ metrics: the all-class-image conventions and the localized metrics (hand cases, an independent
implementation written from the authors' scorer's description, scipy's zoom)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import ndimage

from countboard.metrics.praco_multiclass import (
    MC_CSV_COLUMNS,
    localized_class_sums,
    mc_final_metrics_row,
    multiclass_localized_metrics,
    multiclass_metrics,
    official_multiclass_metrics,
)
from countboard.metrics.praco_official import zoom_keep_sum

PRED = [[2.0, 1.0, 4.0], [5.0, 5.0, 5.0], [1.0, 3.0, 0.0]]
GT = [[2, 0, 3], [1, 2, 3], [0, 3, 0]]   # image 2 holds every class


def test_all_class_images_leave_out_or_count_by_hand():
    left = multiclass_metrics(PRED, GT)
    counted = multiclass_metrics(PRED, GT, all_class_images="count")
    # negatives: image 1 {1.0} (G = 5), image 3 {1.0, 0.0} (G = 3); image 2 has none
    assert left["mc_mnp_macro"] == pytest.approx((1.0 + 0.5) / 2)
    assert counted["mc_mnp_macro"] == pytest.approx((1.0 + 0.5) / 3)
    assert left["mc_nmn_macro"] == pytest.approx((1 / 5 + 0.5 / 3) / 2)
    assert counted["mc_nmn_macro"] == pytest.approx((1 / 5 + 0.5 / 3) / 3)
    # PCCN: image 1 d_pos 0.5 < 1.5 (both variants); image 3 d_pos 0 < 2.5: 2 images nearer
    assert left["mc_pccn_one_at_a_time"] == 100.0 and counted["mc_pccn_one_at_a_time"] == pytest.approx(200 / 3)
    for key in ("mc_mnp_micro", "mc_nmn_micro", "mc_mae_macro", "mc_mae_micro", "mc_rmse_macro", "mc_rmse_micro"):
        assert left[key] == counted[key], key
    official = official_multiclass_metrics(PRED, GT)
    assert official == {f"official_{k}": counted[k] for k in ("mc_mnp_macro", "mc_nmn_macro",
                                                                "mc_pccn_one_at_a_time", "mc_pccn_avg_gt")}
    with pytest.raises(ValueError, match="all_class_images"):
        multiclass_metrics(PRED, GT, all_class_images="sometimes")


def test_zoom_keep_sum_is_scipy_zoom_of_order_1():
    rng = np.random.default_rng(3)
    for shape, target in (((5, 7), (9, 4)), ((3, 3), (8, 8)), ((10, 6), (4, 13)), ((1, 4), (2, 2)),
                          ((56, 9), (55, 9)), ((26, 30), (12, 29))):  # scipy zeroes a last row / column
        a = rng.random(shape)
        ref = ndimage.zoom(a, (target[0] / shape[0], target[1] / shape[1]), order=1)
        ref = ref * (a.sum() / ref.sum())
        np.testing.assert_allclose(zoom_keep_sum(a, target), ref, atol=1e-12)
        assert zoom_keep_sum(a, target).sum() == pytest.approx(a.sum())
    zeros = np.zeros((2, 2))
    assert zoom_keep_sum(zeros, (3, 3)).sum() == 0.0


def test_localized_by_hand():
    # 4x4 maps, 2x2 cells of 2x2 pixels; a negative predicted pixel is clipped before the cells are summed
    pred = np.zeros((4, 4))
    pred[0, 0], pred[0, 1], pred[3, 3], pred[2, 0] = 2.0, -1.0, 1.0, 0.5
    gt = np.zeros((4, 4))
    gt[1, 1], gt[0, 3] = 1.0, 2.0
    # cells p = [2, 0; 0.5, 1], g = [1, 2; 0, 0]: tp = 1, fp = 1 + 0.5 + 1 = 2.5, ae = 1 + 2 + 0.5 + 1 = 4.5
    s = localized_class_sums(pred, gt, (2,))[2]
    np.testing.assert_allclose(s, [1.0, 2.5, 4.5, 3.0])
    # a second pair of the same image (recall 1, precision 1) and one of another image with no overlap
    sums = {2: np.array([s, [2.0, 0.0, 0.0, 2.0], [0.0, 1.0, 3.0, 2.0]])}
    m = multiclass_localized_metrics(sums, ["a", "a", "b"])
    r1, p1 = 1 / 3, 1 / 3.5
    f1 = 2 * r1 * p1 / (r1 + p1)
    assert m["mc_localized_recall_micro_div4"] == pytest.approx((r1 + 1 + 0) / 3)
    assert m["mc_localized_recall_macro_div4"] == pytest.approx(((r1 + 1) / 2 + 0) / 2)
    assert m["mc_localized_precision_macro_div4"] == pytest.approx(((p1 + 1) / 2 + 0) / 2)
    # image b has TP 0: its F-score is undefined and left out (the image has none: macro over image a only)
    assert m["mc_localized_fscore_micro_div4"] == pytest.approx((f1 + 1) / 2)
    assert m["mc_localized_fscore_macro_div4"] == pytest.approx((f1 + 1) / 2)
    assert m["mc_localized_mae_macro_div4"] == pytest.approx(((4.5 + 0) / 2 + 3) / 2)
    assert m["mc_localized_mae_micro_div4"] == pytest.approx(7.5 / 3)


def _reference_localized(pairs, divisions):
    """The authors' procedure, written out from its description: a table of (image, class) rows, averaged."""
    rows = []
    for image, pred, gt in pairs:
        gt = np.maximum(gt, 0)
        pred = np.maximum(pred, 0)
        if pred.shape != gt.shape:
            zoomed = ndimage.zoom(pred, (gt.shape[0] / pred.shape[0], gt.shape[1] / pred.shape[1]), order=1)
            pred = zoomed * (pred.sum() / zoomed.sum()) if zoomed.sum() > 0 else zoomed
        n = 2 ** divisions
        h, w = gt.shape
        mae = tp = fp = 0.0
        for i in range(n):
            for j in range(n):
                ys = slice(i * (h // n), (i + 1) * (h // n) if i < n - 1 else h)
                xs = slice(j * (w // n), (j + 1) * (w // n) if j < n - 1 else w)
                p, g = pred[ys, xs].sum(), gt[ys, xs].sum()
                mae, tp, fp = mae + abs(p - g), tp + min(p, g), fp + max(0, p - g)
        total = gt.sum()
        recall = tp / total if total > 0 else np.nan
        precision = tp / (tp + fp) if tp + fp > 0 else np.nan
        f = 2 * precision * recall / (precision + recall) if precision > 0 and recall > 0 else np.nan
        rows.append({"image": image, "mae": mae, "recall": recall, "precision": precision, "fscore": f})
    table = pd.DataFrame(rows)
    per_image = table.groupby("image")[["mae", "recall", "precision", "fscore"]].mean()
    return {**{f"{k}_macro": per_image[k].mean() for k in per_image},
            **{f"{k}_micro": table[k].mean() for k in per_image}}


def test_localized_equals_an_independent_implementation_on_random_maps():
    rng = np.random.default_rng(7)
    pairs = []
    for k in range(14):
        gt = rng.random((int(rng.integers(9, 20)), int(rng.integers(9, 20))))
        gt[gt < 0.6] = 0.0
        shape = gt.shape if k % 3 else (int(rng.integers(5, 25)), int(rng.integers(5, 25)))
        pred = rng.normal(0.2, 0.5, shape)     # negative pixels are clipped
        if k == 4:
            pred[:] = -1.0                      # nothing predicted: precision undefined
        if k == 5:
            gt[:] = 0.0                         # no ground truth: recall undefined
        pairs.append((f"img{k // 2}", pred, gt))
    index = [p[0] for p in pairs]
    for divisions, n in ((1, 2), (2, 4), (3, 8)):
        sums = np.array([localized_class_sums(pred, gt, (n,))[n] for _, pred, gt in pairs])
        got = multiclass_localized_metrics({n: sums}, index)
        ref = _reference_localized(pairs, divisions)
        for key, value in ref.items():
            assert got[f"mc_localized_{key}_div{n * n}"] == pytest.approx(value, rel=1e-10, abs=1e-12), key


def test_final_metrics_row_has_the_released_columns():
    row = mc_final_metrics_row("M", {"mc_mae_macro": 1.23456, "official_mc_mnp_macro": 0.5})
    assert list(row)[:4] == ["Model", "MNP_macro", "MNP_micro", "NMN_macro"]
    assert row["MAE_macro"] == 1.235 and row["MNP_macro"] == 0.5 and np.isnan(row["MNP_micro"])
    assert "Localized_Fscore_micro_div64" in MC_CSV_COLUMNS and len(MC_CSV_COLUMNS) == 10 + 24
