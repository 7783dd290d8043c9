"""PrACo metrics as the authors' released scorer (``main_statistics.py``) computes them: the ``official_*`` keys.

The paper's definitions (``countboard.metrics.counting``) stay the main metrics; these reproduce the published
numbers. Where the conventions differ (see ``docs/praco.md``):

- CntR: the positive class's own column of each mosaic row (no mosaic, NaN) contributes a recall of 1 to the
  image's mean, so the released CntR is higher than the paper's Eq. 6.
- Localized metrics work on density maps clipped at 0 per pixel, a predicted half resized (``scipy.ndimage.zoom``
  of order 1: linear, corner pixels aligned; sum kept) to the ground-truth map's shape, cells of ``floor(H / n)`` with the last row/column taking the remainder, and
  "macro" / "micro" name the average over mosaics (per image then over images / over all mosaics), not over cells.
- Rounding (``official_round``): metrics to 3 decimals, PCCN to 2; counts are stored with 2 decimals.

A ratio with a zero denominator is NaN and left out of its mean, as in the released scorer.
"""

from __future__ import annotations

import numpy as np

from countboard.metrics.counting import _nanmean, _ratio

#: Grid sides of the localized metrics (2^d x 2^d cells, d = 1, 2, 3) and their ``div`` suffix (cell count).
OFFICIAL_GRIDS = (2, 4, 8)
LOCALIZED = ("total_mae", "recall", "precision", "f_score")
_CSV_LOCALIZED = {"total_mae": "Total_MAE", "recall": "Recall", "precision": "Precision", "f_score": "F-score"}

#: ``final_metrics_<split>.csv`` column -> project metric key, in the released column order.
CSV_COLUMNS: dict[str, str] = {
    "AvgNP": "official_avg_np",
    "AvgNMN": "official_avg_nmn",
    "PCCN": "official_pccn",
    "MAE": "official_mae",
    "RMSE": "official_rmse",
    "AvgCntRecall": "official_avg_cnt_recall",
    "AvgCntPrecision": "official_avg_cnt_precision",
    "AvgCntFscore": "official_avg_cnt_fscore",
}
for _metric in LOCALIZED:
    for _avg in ("macro", "micro"):
        for _n in OFFICIAL_GRIDS:
            CSV_COLUMNS[f"Localized_{_CSV_LOCALIZED[_metric]}_{_avg}_div{_n * _n}"] = (
                f"official_localized_{_metric}_{_avg}_div{_n * _n}")


def official_round(metrics: dict[str, float]) -> dict[str, float]:
    """Round as the released scorer writes ``final_metrics``: 3 decimals, PCCN 2 (NaN stays NaN).

    Example:
        >>> official_round({"official_pccn": 66.6666, "official_mae": 1.23456})
        {'official_pccn': 66.67, 'official_mae': 1.235}
    """
    return {k: float(np.round(v, 2 if k == "official_pccn" else 3)) for k, v in metrics.items()}


def official_negative_metrics(counts, gt, pos_idx) -> dict[str, float]:
    """Test 1 (negative labels) as released: AvgNP, AvgNMN, PCCN, MAE, RMSE.

    ``AvgNP`` = mean over images of positive count / gt; ``AvgNMN`` = mean over images of the mean of the other
    columns / gt (images with gt 0 have no ratio); PCCN = % of images with ``|gt - pos| < |gt - mean neg|``;
    MAE / RMSE of the positive count. Counts are used as given (no clipping).

    Args:
        counts: ``(N, C)`` counts, one column per class of the split.
        gt: ``(N,)`` ground-truth counts.
        pos_idx: ``(N,)`` column of each image's own class.

    Example:
        >>> m = official_negative_metrics([[4.0, 1.0, 3.0], [2.0, 0.0, 2.0]], [4, 2], [0, 1])
        >>> m["official_avg_np"], m["official_avg_nmn"], m["official_pccn"]
        (0.5, 0.75, 50.0)
    """
    counts = np.asarray(counts, np.float64)
    gt = np.asarray(gt, np.float64)
    pos_idx = np.asarray(pos_idx, np.int64)
    n, c = counts.shape
    rows = np.arange(n)
    pos = counts[rows, pos_idx]
    neg = (counts.sum(axis=1) - pos) / (c - 1)
    err = pos - gt
    return {
        "official_avg_np": _nanmean(_ratio(pos, gt)),
        "official_avg_nmn": _nanmean(_ratio(neg, gt)),
        "official_pccn": float(100.0 * np.mean(np.abs(gt - pos) < np.abs(gt - neg))) if n else float("nan"),
        "official_mae": float(np.mean(np.abs(err))) if n else float("nan"),
        "official_rmse": float(np.sqrt(np.mean(err**2))) if n else float("nan"),
    }


def official_mosaic_metrics(upper, lower, gt, pos_idx) -> dict[str, float]:
    """Test 2 (mosaics) as released: AvgCntRecall, AvgCntPrecision, AvgCntFscore.

    Negative counts are set to 0; per mosaic ``R = min(up, gt) / gt``, ``P = min(up, gt) / (up + low)``,
    ``F1 = 2PR / (P + R)`` (NaN on a zero denominator); per image the mean over columns, then over images. The
    positive column ``pos_idx[i]`` (no mosaic) has recall 1 (0/0 when gt is 0) and no precision nor F1. Any other
    NaN cell is a missing mosaic and is left out.

    Example:
        >>> nan = float("nan")
        >>> m = official_mosaic_metrics([[nan, 3.0, 1.0]], [[nan, 1.0, 0.0]], [4], [0])
        >>> round(m["official_avg_cnt_recall"], 4), m["official_avg_cnt_precision"]
        (0.6667, 0.875)
    """
    upper = np.clip(np.asarray(upper, np.float64), 0, None)
    lower = np.clip(np.asarray(lower, np.float64), 0, None)
    gt = np.asarray(gt, np.float64)
    gt2 = np.broadcast_to(gt[:, None], upper.shape)
    tp = np.minimum(upper, gt2)
    positive = np.zeros(upper.shape, bool)
    positive[np.arange(len(upper)), np.asarray(pos_idx, np.int64)] = True
    recall = _ratio(np.where(positive, gt2, tp), gt2)
    precision = np.where(positive, np.nan, _ratio(tp, upper + lower))
    f1 = _ratio(2 * precision * recall, precision + recall)
    return {
        "official_avg_cnt_recall": _nanmean(_nanmean(recall, axis=1)),
        "official_avg_cnt_precision": _nanmean(_nanmean(precision, axis=1)),
        "official_avg_cnt_fscore": _nanmean(_nanmean(f1, axis=1)),
    }


def resize_keep_sum(density: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Bilinear resize (pixel centres aligned, edges clamped, no antialiasing) rescaled to keep the map's sum.

    Example:
        >>> float(resize_keep_sum(np.ones((2, 2)), (4, 6)).sum())
        4.0
    """
    density = np.asarray(density, np.float64)
    if density.shape == tuple(shape):
        return density
    out = _bilinear(_bilinear(density, shape[0], axis=0), shape[1], axis=1)
    total, new_total = density.sum(), out.sum()
    return out * (total / new_total) if new_total != 0 else out


def _bilinear(a: np.ndarray, size: int, axis: int) -> np.ndarray:
    """Linear interpolation along one axis with half-pixel centres (cv2 INTER_LINEAR / torch align_corners=False)."""
    n = a.shape[axis]
    src = np.clip((np.arange(size) + 0.5) * n / size - 0.5, 0, n - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    w = (src - lo).reshape([-1 if k == axis else 1 for k in range(a.ndim)])
    return np.take(a, lo, axis=axis) * (1 - w) + np.take(a, hi, axis=axis) * w


def zoom_keep_sum(density: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The released ``_resize_density_map``: ``scipy.ndimage.zoom(order=1)`` with factors ``shape / density.shape``
    (linear, corner pixels aligned, scipy's default ``constant`` mode), rescaled to keep the sum when the resized
    map's sum is positive.

    scipy itself is called, edge behaviour included: for some size pairs (e.g. 56 to 55 rows) rounding puts the last
    output coordinate just past the input's last sample, and scipy writes 0 there (the ``constant`` value) before
    the sum is restored over the other pixels, as the released scorer does.

    Example:
        >>> zoom_keep_sum(np.array([[0.0, 3.0]]), (1, 3)).tolist()  # linear 0, 1.5, 3, then scaled to sum 3
        [[0.0, 1.0, 2.0]]
    """
    from scipy import ndimage

    density = np.asarray(density, np.float64)
    if density.shape == tuple(shape):
        return density
    out = ndimage.zoom(density, (shape[0] / density.shape[0], shape[1] / density.shape[1]), order=1)
    if out.shape != tuple(shape):  # scipy rounds n * (m / n): always m, checked all the same
        raise ValueError(f"zoom of a {density.shape} map gave {out.shape}, not {tuple(shape)}")
    total, new_total = density.sum(), out.sum()
    return out * (total / new_total) if new_total > 0 else out


def official_cell_edges(length: int, n: int) -> np.ndarray:
    """Cell edges of ``n`` cells along ``length`` pixels: ``floor(length / n)`` each, the last takes the rest.

    Example:
        >>> official_cell_edges(10, 4).tolist()
        [0, 2, 4, 6, 10]
    """
    step = length // n
    return np.array([k * step for k in range(n)] + [length])


def official_cell_sums(density: np.ndarray, n: int) -> np.ndarray:
    """``(n, n)`` sums of ``density`` over the released scorer's cells."""
    ys, xs = official_cell_edges(density.shape[0], n), official_cell_edges(density.shape[1], n)
    out = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            out[a, b] = density[ys[a]:ys[a + 1], xs[b]:xs[b + 1]].sum()
    return out


def official_mosaic_cells(pred_pos, pred_neg, gt_map, orientation: str = "vertical",
                          grids=OFFICIAL_GRIDS) -> dict[int, np.ndarray]:
    """Per-mosaic sums ``[TP, FP, AE, GT]`` on each grid side ``n`` of ``grids`` (the localized evaluation).

    Every map is clipped at 0 per pixel; a predicted half whose shape differs from ``gt_map`` is resized to it
    (``zoom_keep_sum``: ``scipy.ndimage.zoom(order=1)``, as the released ``_resize_density_map``); the negative
    half's ground truth is zeros; the halves are stacked (``vertical``: the positive on top; ``horizontal``: on the
    left) and cut into ``n x n`` cells. Per cell ``tp = min(p, g)``, ``fp = max(0, p - g)``, ``ae = |p - g|``.

    Args:
        pred_pos: Predicted density map of the positive half.
        pred_neg: Predicted density map of the negative half.
        gt_map: Ground-truth density map of the positive image.
        orientation: ``vertical`` or ``horizontal``.
        grids: Grid sides.

    Returns:
        ``{n: array([TP, FP, AE, GT])}``.
    """
    gt = np.clip(np.asarray(gt_map, np.float64), 0, None)
    halves = [zoom_keep_sum(np.clip(np.asarray(m, np.float64), 0, None), gt.shape) for m in (pred_pos, pred_neg)]
    axis = 0 if orientation == "vertical" else 1
    pred = np.concatenate(halves, axis=axis)
    truth = np.concatenate([gt, np.zeros_like(gt)], axis=axis)
    return official_grid_sums(pred, truth, grids)


def official_grid_sums(pred: np.ndarray, truth: np.ndarray, grids) -> dict[int, np.ndarray]:
    """Per grid ``n``: ``[Σ min(p, g), Σ max(0, p − g), Σ |p − g|, Σ g]`` over the released scorer's cells of two
    maps of one shape (the rows the localized metrics are computed from)."""
    return official_cell_rows({n: official_cell_sums(pred, n) for n in grids}, truth)


def official_cell_rows(pred_cells: dict[int, np.ndarray], truth: np.ndarray) -> dict[int, np.ndarray]:
    """``official_grid_sums`` from the predicted map's cell sums ``{n: (n, n)}`` (``official_cell_sums``, computed
    where the map is) and the ground-truth map."""
    out = {}
    for n, p in pred_cells.items():
        g = official_cell_sums(truth, n)
        out[n] = np.array([np.minimum(p, g).sum(), np.maximum(0.0, p - g).sum(), np.abs(p - g).sum(), g.sum()])
    return out


def official_localized_metrics(sums: dict[int, np.ndarray], image_index) -> dict[str, float]:
    """Localized Total MAE, recall, precision and F-score, macro and micro, from ``official_mosaic_cells`` rows.

    Per mosaic ``recall = TP / GT``, ``precision = TP / (TP + FP)``, F-score their harmonic mean (NaN when either
    is 0 or undefined), ``total_mae = AE``. "macro" is the mean over images of the per-image mean over mosaics;
    "micro" the plain mean over all mosaics.

    Args:
        sums: ``{n: (M, 4)}`` rows ``[TP, FP, AE, GT]`` of ``M`` mosaics per grid side.
        image_index: ``(M,)`` positive image of each mosaic.

    Example:
        >>> sums = {2: np.array([[1.0, 1.0, 2.0, 2.0], [2.0, 0.0, 0.0, 2.0]])}
        >>> m = official_localized_metrics(sums, [0, 1])
        >>> m["official_localized_recall_micro_div4"], m["official_localized_total_mae_macro_div4"]
        (0.75, 1.0)
    """
    _, groups = np.unique(np.asarray(image_index), return_inverse=True)
    out = {}
    for n, rows in sums.items():
        rows = np.asarray(rows, np.float64).reshape(-1, 4)
        tp, fp, ae, gt = rows.T
        recall, precision = _ratio(tp, gt), _ratio(tp, tp + fp)
        good = (recall > 0) & (precision > 0)
        f_score = np.where(good, _ratio(2 * precision * recall, precision + recall), np.nan)
        for name, values in (("total_mae", ae), ("recall", recall), ("precision", precision), ("f_score", f_score)):
            out[f"official_localized_{name}_macro_div{n * n}"] = _macro(values, groups)
            out[f"official_localized_{name}_micro_div{n * n}"] = _nanmean(values)
    return out


def _macro(values: np.ndarray, groups: np.ndarray) -> float:
    """Mean over groups of the mean of the group's defined values."""
    ok = ~np.isnan(values)
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    sums = np.bincount(groups[ok], weights=values[ok], minlength=n_groups)
    return _nanmean(_ratio(sums, np.bincount(groups[ok], minlength=n_groups)))


def final_metrics_row(model: str, metrics: dict[str, float]) -> dict[str, object]:
    """One row of ``final_metrics_<split>.csv`` (released column names and order; absent metrics are NaN)."""
    row: dict[str, object] = {"Model": model}
    row.update({col: metrics.get(key, float("nan")) for col, key in CSV_COLUMNS.items()})
    return row
