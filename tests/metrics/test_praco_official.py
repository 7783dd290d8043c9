"""The released scorer's metrics: hand-computed cases, torch's bilinear resize, the cell rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import ndimage

from countboard.metrics.praco_official import (
    official_cell_edges,
    official_cell_sums,
    official_localized_metrics,
    official_mosaic_cells,
    official_mosaic_metrics,
    official_negative_metrics,
    official_round,
    resize_keep_sum,
    zoom_keep_sum,
)

NAN = math.nan


def test_negative_by_hand_with_a_tie_and_gt_zero():
    counts = [[5.0, 8.0, 10.0], [1.0, 0.0, 2.0], [0.0, -1.0, 3.0]]
    m = official_negative_metrics(counts, gt=[7, 2, 0], pos_idx=[0, 1, 0])
    # image 0: pos 5, neg 9, gt 7 -> tie (not nearer); image 1: pos 0, neg 1.5 -> |2-0| > |2-1.5|;
    # image 2: gt 0, pos 0, neg 1 -> nearer; gt 0 gives no NP / NMN ratio
    assert m["official_avg_np"] == pytest.approx((5 / 7 + 0 / 2) / 2)
    assert m["official_avg_nmn"] == pytest.approx((9 / 7 + 1.5 / 2) / 2)
    assert m["official_pccn"] == pytest.approx(100 / 3)
    assert m["official_mae"] == pytest.approx((2 + 2 + 0) / 3)
    assert m["official_rmse"] == pytest.approx(math.sqrt((4 + 4 + 0) / 3))


def test_mosaic_positive_column_adds_recall_one():
    upper = [[NAN, 3.0, 0.0, NAN], [-2.0, NAN, 1.0, 5.0]]
    lower = [[NAN, 1.0, 0.0, 2.0], [4.0, NAN, 1.0, 0.0]]
    m = official_mosaic_metrics(upper, lower, gt=[4, 2], pos_idx=[0, 1])
    # image 0: recalls 1 (own), 3/4, 0/4 (col 3 missing); precisions 3/4, 0/0 -> NaN; F1 3/4, NaN
    # image 1: upper -2 -> 0: R 0, P 0 -> F1 NaN; own: 1; col 2: R 1/2, P 1/2; col 3: min(5, 2): R 1, P 2/5
    r = ((1 + 0.75 + 0) / 3 + (0 + 1 + 0.5 + 1) / 4) / 2
    p = (0.75 + (0 + 0.5 + 0.4) / 3) / 2
    f = (0.75 + (0.5 + 0.8 / 1.4) / 2) / 2
    assert m["official_avg_cnt_recall"] == pytest.approx(r)
    assert m["official_avg_cnt_precision"] == pytest.approx(p)
    assert m["official_avg_cnt_fscore"] == pytest.approx(f)


@pytest.mark.parametrize("src,dst", [((5, 7), (12, 9)), ((24, 32), (7, 11)), ((3, 3), (3, 8))])
def test_resize_matches_torch_bilinear_and_keeps_the_sum(src, dst):
    a = np.random.default_rng(1).random(src)
    t = torch.nn.functional.interpolate(torch.from_numpy(a)[None, None], size=dst, mode="bilinear",
                                        align_corners=False)[0, 0].numpy()
    got = resize_keep_sum(a, dst)
    np.testing.assert_allclose(got, t * a.sum() / t.sum(), rtol=1e-12)
    assert got.sum() == pytest.approx(a.sum())


def _released_cells(pred_pos, pred_neg, gt, n):
    """The released single-class scorer, transcribed: ReLU on load, ``_resize_density_map`` (``ndimage.zoom`` of
    order 1 with factors target / shape, rescaled to the original count when positive), vertical stack, cells of
    ``h // n`` with the last taking the rest, per-cell min / max / abs summed."""
    def resize(m, shape):
        count = m.sum()
        out = ndimage.zoom(m, (shape[0] / m.shape[0], shape[1] / m.shape[1]), order=1)
        return out * (count / out.sum()) if out.sum() > 0 else out

    gt = np.maximum(gt, 0)
    halves = [np.maximum(m, 0) for m in (pred_pos, pred_neg)]
    halves = [resize(m, gt.shape) if m.shape != gt.shape else m for m in halves]
    pred, truth = np.vstack(halves), np.vstack([gt, np.zeros_like(gt)])
    h, w = pred.shape
    tp = fp = ae = g = 0.0
    for i in range(n):
        for j in range(n):
            rows = slice(i * (h // n), (i + 1) * (h // n) if i < n - 1 else h)
            cols = slice(j * (w // n), (j + 1) * (w // n) if j < n - 1 else w)
            p, q = pred[rows, cols].sum(), truth[rows, cols].sum()
            tp, fp, ae, g = tp + min(p, q), fp + max(0.0, p - q), ae + abs(p - q), g + q
    return np.array([tp, fp, ae, g])


@pytest.mark.parametrize(("pred_shape", "gt_shape"), [((6, 9), (10, 16)), ((13, 20), (10, 16)),
                                                       ((10, 16), (10, 16)), ((56, 12), (55, 12))])
def test_resized_halves_follow_the_released_scorer(pred_shape, gt_shape):
    """A predicted half of another shape than the ground truth is resized as the released scorer does
    (``scipy.ndimage.zoom``, corner pixels aligned), not with half-pixel bilinear; 56 to 55 rows is a pair where
    scipy writes 0 to the last row (its last coordinate rounds past the input)."""
    rng = np.random.default_rng(sum(pred_shape))
    gt = rng.random(gt_shape) * (rng.random(gt_shape) < 0.3)
    pos, neg = rng.normal(0.2, 0.3, pred_shape), rng.normal(0.05, 0.2, pred_shape)
    got = official_mosaic_cells(pos, neg, gt, grids=(2, 4, 8))
    for n in (2, 4, 8):
        np.testing.assert_allclose(got[n], _released_cells(pos, neg, gt, n), rtol=1e-12, atol=1e-12)
    if pred_shape != gt.shape:
        half_pixel = resize_keep_sum(np.maximum(pos, 0), gt.shape)
        assert not np.allclose(half_pixel, zoom_keep_sum(np.maximum(pos, 0), gt.shape))


def test_cells_floor_size_last_takes_the_rest():
    assert official_cell_edges(10, 4).tolist() == [0, 2, 4, 6, 10]
    assert official_cell_edges(3, 8).tolist() == [0] * 8 + [3]   # fewer pixels than cells: all in the last
    a = np.arange(30, dtype=float).reshape(5, 6)
    cells = official_cell_sums(a, 2)
    assert cells.tolist() == [[a[:2, :3].sum(), a[:2, 3:].sum()], [a[2:, :3].sum(), a[2:, 3:].sum()]]


def test_localized_by_hand():
    gt = np.array([[1.0, 0.0], [0.0, 1.0]])
    pos = np.array([[2.0, -1.0], [0.0, 1.0]])   # -1 clipped at 0 per pixel
    neg = np.array([[0.0, 0.0], [0.5, 0.0]])
    sums = official_mosaic_cells(pos, neg, gt, grids=(2,))[2]
    # stacked 4x2, 2x2 cells of 2x1: pred cells [[2, 1], [0.5, 0]], gt cells [[1, 1], [0, 0]]
    assert sums.tolist() == [2.0, 1.5, 1.5, 2.0]
    m = official_localized_metrics({2: np.array([sums, [0.0, 1.0, 1.0, 2.0], [1.0, 0.0, 0.0, 1.0]])}, [0, 0, 1])
    # mosaic recalls 1, 0, 1; precisions 2/3.5, 0, 1; F1 NaN for the second (both 0)
    assert m["official_localized_recall_micro_div4"] == pytest.approx(2 / 3)
    assert m["official_localized_recall_macro_div4"] == pytest.approx((0.5 + 1) / 2)
    f0 = 2 * (2 / 3.5) / (2 / 3.5 + 1)
    assert m["official_localized_f_score_micro_div4"] == pytest.approx((f0 + 1) / 2)
    assert m["official_localized_f_score_macro_div4"] == pytest.approx((f0 + 1) / 2)
    assert m["official_localized_total_mae_macro_div4"] == pytest.approx(((1.5 + 1) / 2 + 0) / 2)


def test_horizontal_collage_stacks_side_by_side():
    gt = np.ones((2, 2))
    sums = official_mosaic_cells(np.ones((2, 2)), np.ones((4, 4)), gt, "horizontal", grids=(2,))[2]
    # the right half is resized to 2x2 keeping its sum 16: pred cells [[2, 8], [2, 8]], gt [[2, 0], [2, 0]]
    assert sums.tolist() == [4.0, 16.0, 16.0, 4.0]


def test_rounding():
    r = official_round({"official_pccn": 50.006, "official_avg_np": 0.1236, "official_mae": NAN})
    assert r["official_pccn"] == 50.01 and r["official_avg_np"] == 0.124 and math.isnan(r["official_mae"])
