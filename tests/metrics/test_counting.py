"""PrACo and classic counting metrics: hand-computed cases and a direct loop implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from countboard.metrics.counting import (
    classic_metrics,
    coarsen,
    count_drift,
    localized_metrics,
    localized_mosaic_metrics,
    mosaic_metrics,
    negative_label_metrics,
    pool_grid,
)

NAN = float("nan")


# ---------------------------------------------------------------- direct loop implementations (paper's formulas)
def loop_negative(counts, gt, pos_idx):
    nmn_terms, near = [], []
    for i, row in enumerate(counts):
        neg = [row[j] for j in range(len(row)) if j != pos_idx[i]]
        neg_mean = sum(neg) / len(neg)
        if gt[i] > 0:
            nmn_terms.append(neg_mean / gt[i])
        near.append(abs(row[pos_idx[i]] - gt[i]) < abs(neg_mean - gt[i]))
    return sum(nmn_terms) / len(nmn_terms), 100 * sum(near) / len(near)


def loop_mosaic(upper, lower, gt):
    per_image = {"p": [], "r": [], "f": []}
    for i in range(len(upper)):
        ps, rs, fs = [], [], []
        for j in range(len(upper[i])):
            up, low = upper[i][j], lower[i][j]
            if math.isnan(up):
                continue
            up, low = max(up, 0.0), max(low, 0.0)
            tp = min(up, gt[i])
            p = tp / (up + low) if up + low else None
            r = tp / gt[i] if gt[i] else None
            if p is not None:
                ps.append(p)
            if r is not None:
                rs.append(r)
            if p is not None and r is not None and p + r:
                fs.append(2 * p * r / (p + r))
        for key, vals in (("p", ps), ("r", rs), ("f", fs)):
            if vals:
                per_image[key].append(sum(vals) / len(vals))
    return {k: sum(v) / len(v) for k, v in per_image.items()}


# ---------------------------------------------------------------- negative-label test
def test_negative_hand_computed():
    counts = [[4.0, 1.0, 3.0], [2.0, 0.0, 2.0], [1.0, 1.0, 5.0]]
    m = negative_label_metrics(counts, gt=[4, 2, 5], pos_idx=[0, 1, 2])
    # nmn: (2/4 + 2/2 + 1/5) / 3; pccn: images 0 and 2 are nearer with the positive prompt
    assert m["nmn"] == pytest.approx((0.5 + 1.0 + 0.2) / 3)
    assert m["pccn"] == pytest.approx(200 / 3)
    assert m["mae"] == pytest.approx(2 / 3)
    assert m["rmse"] == pytest.approx(math.sqrt(4 / 3))
    assert m["mape"] == pytest.approx(1 / 3)
    assert m["n_gt_zero"] == 0


def test_negative_oracle_is_perfect():
    gt = np.array([3, 7, 1, 12])
    pos_idx = np.array([2, 0, 1, 2])
    counts = np.zeros((4, 3))
    counts[np.arange(4), pos_idx] = gt
    m = negative_label_metrics(counts, gt, pos_idx)
    assert (m["nmn"], m["pccn"], m["mae"], m["rmse"], m["mape"]) == (0.0, 100.0, 0.0, 0.0, 0.0)


def test_negative_gt_zero_left_out_of_nmn_and_counted():
    counts = [[0.0, 3.0], [2.0, 2.0]]
    m = negative_label_metrics(counts, gt=[0, 2], pos_idx=[0, 0])
    assert m["nmn"] == pytest.approx(1.0)
    assert m["n_gt_zero"] == 1
    assert m["mape"] == pytest.approx(0.0)
    assert m["pccn"] == pytest.approx(50.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_negative_matches_loop(seed):
    rng = np.random.default_rng(seed)
    n, c = 13, 6
    counts = rng.uniform(0, 30, (n, c))
    gt = rng.integers(0, 30, n)
    pos_idx = rng.integers(0, c, n)
    m = negative_label_metrics(counts, gt, pos_idx)
    nmn, pccn = loop_negative(counts.tolist(), gt.tolist(), pos_idx.tolist())
    assert m["nmn"] == pytest.approx(nmn)
    assert m["pccn"] == pytest.approx(pccn)
    pos = counts[np.arange(n), pos_idx]
    assert m["mae"] == pytest.approx(np.mean(np.abs(pos - gt)))


def test_negative_bad_shapes():
    with pytest.raises(ValueError, match="at least 2 classes"):
        negative_label_metrics([[1.0]], [1], [0])
    with pytest.raises(ValueError, match="pos_idx must index"):
        negative_label_metrics([[1.0, 2.0]], [1], [2])
    with pytest.raises(ValueError, match="must be"):
        negative_label_metrics([[1.0, 2.0]], [1, 2], [0])


# ---------------------------------------------------------------- mosaic test
def test_mosaic_paper_figure_3():
    # Fig. 3: gt 15, c_pos = 20, c_neg = 3 -> TP 15, FP 5 + 3
    m = mosaic_metrics([[20.0]], [[3.0]], [15])
    assert m["cnt_precision"] == pytest.approx(15 / 23)
    assert m["cnt_recall"] == pytest.approx(1.0)
    assert m["cnt_f1"] == pytest.approx(2 * (15 / 23) / (15 / 23 + 1))


def test_mosaic_hand_computed_per_image_average():
    upper = [[NAN, 10.0, 5.0], [2.0, NAN, 4.0]]
    lower = [[NAN, 0.0, 5.0], [6.0, NAN, -1.0]]
    m = mosaic_metrics(upper, lower, gt=[10, 4])
    # image 0: P = (1 + 0.5) / 2, R = (1 + 0.5) / 2; image 1: P = (0.25 + 1) / 2, R = (0.5 + 1) / 2
    assert m["cnt_precision"] == pytest.approx((0.75 + 0.625) / 2)
    assert m["cnt_recall"] == pytest.approx((0.75 + 0.75) / 2)
    f1_img0 = (1.0 + 0.5) / 2
    f1_img1 = (2 * 0.25 * 0.5 / 0.75 + 1.0) / 2
    assert m["cnt_f1"] == pytest.approx((f1_img0 + f1_img1) / 2)
    p, r = m["cnt_precision"], m["cnt_recall"]
    assert m["cnt_f1_of_means"] == pytest.approx(2 * p * r / (p + r))


def test_mosaic_zero_denominators_left_out():
    # mosaic 1: up = low = 0 -> P undefined; R = 0 and F1 undefined; gt 0 image -> R undefined
    m = mosaic_metrics([[0.0, 4.0], [3.0, NAN]], [[0.0, 0.0], [1.0, NAN]], gt=[4, 0])
    assert m["cnt_precision"] == pytest.approx((1.0 + 0.0) / 2)
    assert m["cnt_recall"] == pytest.approx((0.0 + 1.0) / 2 / 1)
    assert m["cnt_f1"] == pytest.approx(1.0)


def test_mosaic_oracle_is_perfect():
    gt = np.array([5, 9, 1])
    upper = np.where(np.eye(3, dtype=bool), np.nan, gt[:, None].astype(float))
    lower = np.where(np.eye(3, dtype=bool), np.nan, 0.0)
    m = mosaic_metrics(upper, lower, gt)
    assert m == {"cnt_precision": 1.0, "cnt_recall": 1.0, "cnt_f1": 1.0, "cnt_f1_of_means": 1.0}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mosaic_matches_loop(seed):
    rng = np.random.default_rng(seed)
    n, c = 9, 5
    upper = rng.uniform(-2, 25, (n, c))
    lower = rng.uniform(-2, 10, (n, c))
    upper[rng.random((n, c)) < 0.2] = np.nan
    lower[np.isnan(upper)] = np.nan
    gt = rng.integers(0, 20, n)
    m = mosaic_metrics(upper, lower, gt)
    ref = loop_mosaic(upper.tolist(), lower.tolist(), gt.tolist())
    assert m["cnt_precision"] == pytest.approx(ref["p"])
    assert m["cnt_recall"] == pytest.approx(ref["r"])
    assert m["cnt_f1"] == pytest.approx(ref["f"])


def test_count_drift():
    drift = count_drift([[NAN, 12.0, 6.0], [3.0, NAN, 1.0]], [10.0, 0.0])
    np.testing.assert_allclose(drift, [[NAN, 0.2, 0.4], [NAN, NAN, NAN]])


# ---------------------------------------------------------------- classic and localized
def test_classic_metrics():
    m = classic_metrics([1.0, 5.0, 2.0], [2, 2, 0])
    assert m["mae"] == pytest.approx(2.0)
    assert m["rmse"] == pytest.approx(math.sqrt((1 + 9 + 4) / 3))
    assert m["mape"] == pytest.approx((0.5 + 1.5) / 2)
    assert m["n_gt_zero"] == 1


def test_pool_grid_and_coarsen():
    rng = np.random.default_rng(0)
    density = rng.random((37, 50))
    cells = pool_grid(density, 8)
    assert cells.sum() == pytest.approx(density.sum())
    assert cells[0, 0] == pytest.approx(density[:4, :6].sum())
    np.testing.assert_allclose(coarsen(cells, 4), pool_grid(density, 4))
    np.testing.assert_allclose(coarsen(cells, 2), pool_grid(density, 2))
    tiny = pool_grid(np.ones((3, 3)), 8)
    assert tiny.sum() == pytest.approx(9.0)


def test_localized_micro_on_halves_equals_mosaic_metrics():
    rng = np.random.default_rng(4)
    m = 12
    upper, lower = rng.uniform(0, 20, m), rng.uniform(0, 8, m)
    gt = np.repeat(rng.integers(1, 20, 4), 3).astype(float)
    image = np.repeat(np.arange(4), 3)
    pred = np.stack([upper, lower], 1)[:, :, None]
    gtc = np.stack([gt, np.zeros(m)], 1)[:, :, None]
    loc = localized_metrics(pred, gtc, image)
    ref = mosaic_metrics(upper.reshape(4, 3), lower.reshape(4, 3), gt.reshape(4, 3)[:, 0])
    assert loc["precision_micro"] == pytest.approx(ref["cnt_precision"])
    assert loc["recall_micro"] == pytest.approx(ref["cnt_recall"])
    assert loc["f1_micro"] == pytest.approx(ref["cnt_f1"])


def test_localized_hand_computed_macro():
    pred = np.array([[[2.0, 0.0], [1.0, 0.0]]])
    gt = np.array([[[1.0, 1.0], [0.0, 0.0]]])
    m = localized_metrics(pred, gt, [0])
    # cells: (p, g) = (2, 1), (0, 1), (1, 0), (0, 0)
    assert m["precision_macro"] == pytest.approx((0.5 + 0.0) / 2)
    assert m["recall_macro"] == pytest.approx((1.0 + 0.0) / 2)
    assert m["f1_macro"] == pytest.approx((2 / 3 + 0 + 0) / 3)
    assert m["f1_micro"] == pytest.approx(2 * (1 / 3) * 0.5 / (1 / 3 + 0.5))


def test_localized_misplaced_mass_is_penalised():
    gt = np.zeros((1, 8, 8))
    gt[0, 0, 0] = 5.0
    shifted = np.zeros((1, 8, 8))
    shifted[0, 0, 3] = 5.0
    m = localized_mosaic_metrics(shifted, gt, [0])
    assert m["loc_f1_micro_2x2"] == pytest.approx(1.0)
    assert m["loc_recall_micro_4x4"] == pytest.approx(0.0)
    assert math.isnan(m["loc_f1_micro_8x8"])
    assert sorted(m) == sorted(f"loc_{a}_{b}_{n}x{n}" for a in ("precision", "recall", "f1")
                               for b in ("micro", "macro") for n in (2, 4, 8))


def test_docstring_examples():
    import doctest

    import countboard.metrics.counting as counting

    result = doctest.testmod(counting, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8 and result.failed == 0
