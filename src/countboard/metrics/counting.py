"""Counting metrics of the PrACo benchmark (negative-label and mosaic tests) and the classic ones.

All functions are pure numpy. Conventions: ``counts[i, j]`` is the count of image ``i`` prompted with class ``j``;
``pos_idx[i]`` is the column of image ``i``'s own class; mosaic arrays ``upper[i, j]`` / ``lower[i, j]`` are the
counts on the positive (top) and negative (bottom) halves of the mosaic of image ``i`` with a picture of class
``j`` below, NaN where no mosaic exists (``j`` is ``i``'s own class, or the mosaic failed).

A ratio whose denominator is zero is left out of its average (never counted as 0 or 1).
"""

from __future__ import annotations

import numpy as np

from countboard.metrics import bootstrap as bs
from countboard.metrics.bootstrap import UnitStatistic

GRIDS = (2, 4, 8)


def _as_float(a, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    return arr


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` with NaN where ``den`` is 0 or either side is NaN."""
    num, den = np.broadcast_arrays(np.asarray(num, np.float64), np.asarray(den, np.float64))
    out = np.full(num.shape, np.nan)
    ok = (den != 0) & ~np.isnan(den) & ~np.isnan(num)
    out[ok] = num[ok] / den[ok]
    return out


def _nanmean(a: np.ndarray, axis=None) -> np.ndarray | float:
    """Mean of the defined entries; NaN (without a warning) where none is defined."""
    a = np.asarray(a, dtype=np.float64)
    n = (~np.isnan(a)).sum(axis=axis)
    s = np.where(np.isnan(a), 0.0, a).sum(axis=axis)
    return _ratio(s, n) if np.ndim(n) else (float(s / n) if n else float("nan"))


def classic_metrics(pred, gt) -> dict[str, float]:
    """MAE, RMSE and MAPE of predicted against ground-truth counts.

    MAPE is the paper's fraction ``mean(|c - gt| / gt)`` over images with ``gt > 0`` (``n_gt_zero`` says how
    many were left out).

    Example:
        >>> classic_metrics([2.0, 6.0], [4, 4])
        {'mae': 2.0, 'rmse': 2.0, 'mape': 0.5, 'n_gt_zero': 0}
    """
    pred, gt = _as_float(pred, "pred", 1), _as_float(gt, "gt", 1)
    if pred.shape != gt.shape:
        raise ValueError(f"pred {pred.shape} and gt {gt.shape} must have the same shape")
    err = pred - gt
    return {
        "mae": float(np.mean(np.abs(err))) if len(err) else float("nan"),
        "rmse": float(np.sqrt(np.mean(err**2))) if len(err) else float("nan"),
        "mape": _nanmean(_ratio(np.abs(err), gt)),
        "n_gt_zero": int((gt == 0).sum()),
    }


def negative_label_metrics(counts, gt, pos_idx) -> dict[str, float]:
    """Metrics of the negative-label test from the images x classes count matrix.

    - ``nmn``: mean over images of (mean over negative classes of ``c_ij``) / ``gt_i``; images with ``gt_i = 0``
      are left out (``n_gt_zero``).
    - ``pccn``: 100 x the fraction of images with ``|c_i,pos - gt_i| < |mean_{j != pos} c_ij - gt_i|``.
    - ``mae``, ``rmse``, ``mape``: classic metrics of the positive entries ``c_i,pos``.

    Args:
        counts: ``(N, C)`` counts, ``C >= 2``.
        gt: ``(N,)`` ground-truth counts of each image's own class.
        pos_idx: ``(N,)`` column of each image's own class.

    Example:
        >>> counts = [[4.0, 1.0, 3.0], [2.0, 0.0, 2.0]]
        >>> m = negative_label_metrics(counts, gt=[4, 2], pos_idx=[0, 1])
        >>> m["nmn"], m["pccn"]
        (0.75, 50.0)
    """
    counts = _as_float(counts, "counts", 2)
    gt = _as_float(gt, "gt", 1)
    pos_idx = np.asarray(pos_idx, dtype=np.int64)
    n, c = counts.shape
    if gt.shape != (n,) or pos_idx.shape != (n,):
        raise ValueError(f"counts is {counts.shape}: gt and pos_idx must be ({n},), got {gt.shape}, {pos_idx.shape}")
    if c < 2:
        raise ValueError(f"the negative-label test needs at least 2 classes, got {c}")
    if n and (pos_idx.min() < 0 or pos_idx.max() >= c):
        raise ValueError(f"pos_idx must index the {c} columns of counts, got values {pos_idx.min()}..{pos_idx.max()}")
    rows = np.arange(n)
    pos = counts[rows, pos_idx]
    neg_mean = (counts.sum(axis=1) - pos) / (c - 1)
    nonzero = gt > 0
    out = classic_metrics(pos, gt)
    out["nmn"] = float(np.mean(neg_mean[nonzero] / gt[nonzero])) if nonzero.any() else float("nan")
    out["pccn"] = float(100.0 * np.mean(np.abs(pos - gt) < np.abs(neg_mean - gt))) if n else float("nan")
    return out


def _per_image_mean(values: np.ndarray) -> float:
    """Average the defined entries of each row, then the defined row means."""
    return _nanmean(_nanmean(values, axis=1))


def mosaic_precision_recall(upper, lower, gt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-mosaic counting precision, recall and F1, each ``(N, C)`` with NaN where undefined.

    Negative counts are clipped to 0; ``P = min(up, gt) / (up + low)``, ``R = min(up, gt) / gt``,
    ``F1 = 2PR / (P + R)``.
    """
    upper = np.clip(_as_float(upper, "upper", 2), 0, None)
    lower = np.clip(_as_float(lower, "lower", 2), 0, None)
    gt = _as_float(gt, "gt", 1)
    if upper.shape != lower.shape or gt.shape != upper.shape[:1]:
        raise ValueError(f"upper {upper.shape}, lower {lower.shape} must match and gt {gt.shape} have their rows")
    gt2 = np.broadcast_to(gt[:, None], upper.shape)
    tp = np.minimum(upper, gt2)
    precision = _ratio(tp, upper + lower)
    recall = _ratio(tp, np.where(np.isnan(upper), np.nan, gt2))
    f1 = _ratio(2 * precision * recall, precision + recall)
    return precision, recall, f1


def mosaic_metrics(upper, lower, gt) -> dict[str, float]:
    """Counting precision, recall and F1 of the mosaic test (averaged per image, then over images).

    Args:
        upper: ``(N, C)`` counts on the positive half, NaN where no mosaic exists.
        lower: ``(N, C)`` counts on the negative half, NaN where no mosaic exists.
        gt: ``(N,)`` ground-truth counts of the positive images.

    Returns:
        ``cnt_precision``, ``cnt_recall``, ``cnt_f1`` (mean of per-mosaic F1) and ``cnt_f1_of_means`` (harmonic
        mean of ``cnt_precision`` and ``cnt_recall``).

    Example:
        >>> nan = float("nan")
        >>> m = mosaic_metrics([[nan, 15.0], [2.0, nan]], [[nan, 0.0], [2.0, nan]], gt=[15, 4])
        >>> m["cnt_precision"], m["cnt_recall"]
        (0.75, 0.75)
    """
    precision, recall, f1 = mosaic_precision_recall(upper, lower, gt)
    p, r = _per_image_mean(precision), _per_image_mean(recall)
    f1_of_means = 0.0 if p + r == 0 else 2 * p * r / (p + r)
    return {"cnt_precision": p, "cnt_recall": r, "cnt_f1": _per_image_mean(f1), "cnt_f1_of_means": f1_of_means}


def count_drift(upper, pos_counts) -> np.ndarray:
    """Correct-count drift ``|c_ij^pos - c_ii| / c_ii`` per mosaic, ``(N, C)`` with NaN where undefined.

    Args:
        upper: ``(N, C)`` counts on the positive half of each mosaic (NaN where no mosaic exists).
        pos_counts: ``(N,)`` count ``c_ii`` of each image alone, prompted with its own class.

    Example:
        >>> count_drift([[float("nan"), 12.0]], [10.0]).round(2).tolist()
        [[nan, 0.2]]
    """
    upper = _as_float(upper, "upper", 2)
    pos = _as_float(pos_counts, "pos_counts", 1)
    if pos.shape != upper.shape[:1]:
        raise ValueError(f"pos_counts {pos.shape} must have one entry per row of upper {upper.shape}")
    return _ratio(np.abs(upper - pos[:, None]), np.broadcast_to(pos[:, None], upper.shape))


def pool_edges(length: int, n: int) -> np.ndarray:
    """Edges of ``n`` cells along ``length`` pixels: ``floor(k * length / n)`` for ``k = 0..n``.

    Example:
        >>> pool_edges(10, 4).tolist()
        [0, 2, 5, 7, 10]
    """
    return np.floor(np.arange(n + 1) * length / n).astype(int)


def pool_grid(density: np.ndarray, n: int) -> np.ndarray:
    """Sum a ``(H, W)`` map over an ``n x n`` grid of cells (cell edges at ``floor(k * H / n)``).

    Example:
        >>> pool_grid(np.ones((4, 6)), 2).tolist()
        [[6.0, 6.0], [6.0, 6.0]]
    """
    h, w = density.shape
    ys, xs = pool_edges(h, n), pool_edges(w, n)
    rows = np.add.reduceat(np.asarray(density, np.float64), ys[:-1], axis=0) if h else np.zeros((n, w))
    cells = np.add.reduceat(rows, xs[:-1], axis=1) if w else np.zeros((n, n))
    empty_y, empty_x = ys[1:] == ys[:-1], xs[1:] == xs[:-1]
    cells[empty_y, :] = 0
    cells[:, empty_x] = 0
    return cells


def coarsen(cells: np.ndarray, n: int) -> np.ndarray:
    """Sum ``(..., G, G)`` grid cells into ``(..., n, n)`` (``n`` divides ``G``)."""
    g = cells.shape[-1]
    if g % n:
        raise ValueError(f"cannot coarsen a {g}x{g} grid to {n}x{n}")
    f = g // n
    return cells.reshape(*cells.shape[:-2], n, f, n, f).sum(axis=(-3, -1))


def localized_metrics(pred_cells, gt_cells, image_index) -> dict[str, float]:
    """Localized counting precision, recall and F1 of mosaics on one grid (micro and macro).

    Per cell ``k`` of a mosaic, with the predicted mass ``p_k`` clipped to 0 and the ground-truth mass ``g_k`` of
    the prompted class (zero on the negative half): ``TP_k = min(p_k, g_k)``, ``FP_k = p_k - TP_k``,
    ``FN_k = g_k - TP_k``. This applies the paper's mosaic TP/FP/FN rule cell by cell, so misplaced mass counts as
    a false positive where it lands and a false negative where it is missing.

    - micro: per mosaic ``P = sum TP / sum p``, ``R = sum TP / sum g``, ``F1 = 2PR / (P + R)``.
    - macro: per mosaic the mean over cells of ``TP_k / p_k`` (cells with ``p_k > 0``), ``TP_k / g_k`` (cells
      with ``g_k > 0``) and ``2 TP_k / (p_k + g_k)`` (cells with ``p_k + g_k > 0``).

    Each is averaged per image (``image_index``), then over images, like ``mosaic_metrics``.

    Args:
        pred_cells: ``(M, n, n)`` predicted mass per cell of each mosaic.
        gt_cells: ``(M, n, n)`` ground-truth mass per cell.
        image_index: ``(M,)`` positive image of each mosaic.

    Returns:
        ``precision_micro``, ``recall_micro``, ``f1_micro``, ``precision_macro``, ``recall_macro``, ``f1_macro``.

    Example:
        >>> pred = np.array([[[2.0, 0.0], [1.0, 0.0]]]); gt = np.array([[[1.0, 1.0], [0.0, 0.0]]])
        >>> m = localized_metrics(pred, gt, [0])
        >>> m["precision_micro"], m["recall_micro"]
        (0.3333333333333333, 0.5)
    """
    pred = np.clip(np.asarray(pred_cells, np.float64), 0, None)
    gt = np.asarray(gt_cells, np.float64)
    idx = np.asarray(image_index)
    if pred.shape != gt.shape or pred.ndim != 3 or idx.shape != pred.shape[:1]:
        raise ValueError(f"pred_cells {pred.shape} and gt_cells {gt.shape} must be (M, n, n) and image_index (M,)")
    return {key: _nanmean(values) for key, values in _localized_per_image(pred, gt, idx).items()}


def _localized_per_image(pred: np.ndarray, gt: np.ndarray, idx: np.ndarray) -> dict[str, np.ndarray]:
    """Each localized metric averaged per image (images in the order of ``np.unique(idx)``), NaN where undefined."""
    m = len(pred)
    pred, gt = pred.reshape(m, -1), gt.reshape(m, -1)
    tp = np.minimum(pred, gt)
    p_micro = _ratio(tp.sum(1), pred.sum(1))
    r_micro = _ratio(tp.sum(1), gt.sum(1))
    per_mosaic = {
        "precision_micro": p_micro,
        "recall_micro": r_micro,
        "f1_micro": _ratio(2 * p_micro * r_micro, p_micro + r_micro),
        "precision_macro": _nanmean(_ratio(tp, pred), axis=1),
        "recall_macro": _nanmean(_ratio(tp, gt), axis=1),
        "f1_macro": _nanmean(_ratio(2 * tp, pred + gt), axis=1),
    }
    _, inverse = np.unique(idx, return_inverse=True)
    return {key: _group_means(values, inverse) for key, values in per_mosaic.items()}


def _group_means(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Mean of the defined values within each group (NaN for a group without one)."""
    ok = ~np.isnan(values)
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    sums = np.bincount(groups[ok], weights=values[ok], minlength=n_groups)
    return _ratio(sums, np.bincount(groups[ok], minlength=n_groups))


def localized_mosaic_metrics(pred_cells, gt_cells, image_index, grids=GRIDS) -> dict[str, float]:
    """``localized_metrics`` on each grid in ``grids`` from the finest ``(M, G, G)`` cells.

    Keys are ``loc_<metric>_<average>_<n>x<n>``, e.g. ``loc_f1_macro_4x4``.

    Example:
        >>> cells = np.ones((1, 8, 8))
        >>> localized_mosaic_metrics(cells, cells, [0])["loc_f1_micro_2x2"]
        1.0
    """
    pred = np.asarray(pred_cells, np.float64)
    gt = np.asarray(gt_cells, np.float64)
    out = {}
    for n in grids:
        for key, value in localized_metrics(coarsen(pred, n), coarsen(gt, n), image_index).items():
            metric, average = key.split("_")
            out[f"loc_{metric}_{average}_{n}x{n}"] = value
    return out


# --- unit statistics: each metric as a reduction of per-image columns, for its bootstrap interval ------------------


def classic_units(pred, gt) -> dict[str, UnitStatistic]:
    """``mae``, ``rmse`` and ``mape`` of ``classic_metrics`` over images (``metrics.bootstrap``).

    Example:
        >>> round(classic_units([2.0, 6.0], [4, 4])["rmse"].value(), 3)
        2.0
    """
    pred, gt = _as_float(pred, "pred", 1), _as_float(gt, "gt", 1)
    err = pred - gt
    return {"mae": UnitStatistic((np.abs(err),), bs.mean), "rmse": UnitStatistic((err**2,), bs.root_mean),
            "mape": UnitStatistic((_ratio(np.abs(err), gt),), bs.mean)}


def exact_count_hits(pred, gt, cap: float | None = None) -> np.ndarray:
    """1.0 where the rounded count equals the ground truth, else 0.0 (a counting-VQA answer is right or wrong).

    With ``cap`` (GeckoNum's "10+" bin, 11) every count above ``cap - 1`` is ``cap``, as the answers are; a count
    that is not finite (the counter failed) is never right.

    Example:
        >>> exact_count_hits([2.4, 3.6, 14.0, float("nan")], [2, 3, 11, 1], cap=11).tolist()
        [1.0, 0.0, 1.0, 0.0]
    """
    pred, gt = _as_float(pred, "pred", 1), _as_float(gt, "gt", 1)
    if pred.shape != gt.shape:
        raise ValueError(f"pred {pred.shape} and gt {gt.shape} must have the same shape")
    finite = np.isfinite(pred)
    rounded = np.floor(np.where(finite, pred, 0.0) + 0.5)
    if cap is not None:
        rounded = np.minimum(rounded, cap)
    return (finite & (rounded == gt)).astype(np.float64)


def exact_count_units(pred, gt, cap: float | None = None) -> dict[str, UnitStatistic]:
    """``exact_accuracy``: the share of images whose rounded count is the ground truth (``exact_count_hits``).

    Example:
        >>> exact_count_units([2.0, 5.0], [2, 4])["exact_accuracy"].value()
        0.5
    """
    return {"exact_accuracy": UnitStatistic((exact_count_hits(pred, gt, cap),), bs.mean)}


def accuracy_by(hits, groups: dict[str, np.ndarray], level: float = bs.LEVEL, seed: int = bs.SEED):
    """Accuracy of 0/1 ``hits`` per combination of ``groups`` (named per-unit columns), each with its bootstrap
    interval over its units: a DataFrame with the group columns, ``n``, ``accuracy``, ``low`` and ``high``.

    Example:
        >>> accuracy_by([1.0, 0.0, 1.0], {"number": np.array([1, 1, 2])})[["number", "n", "accuracy"]].values.tolist()
        [[1.0, 2.0, 0.5], [2.0, 1.0, 1.0]]
    """
    import pandas as pd

    frame = pd.DataFrame({**groups, "_hit": np.asarray(hits, dtype=np.float64)})
    rows = []
    for key, g in frame.groupby(list(groups), sort=True, dropna=False):
        stat = UnitStatistic((g["_hit"].to_numpy(),), bs.mean)
        lo, hi = bs.bootstrap_interval(stat, level=level, seed=seed)
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(groups, key, strict=True)), "n": len(g), "accuracy": stat.value(),
                     "low": lo, "high": hi})
    return pd.DataFrame(rows, columns=[*groups, "n", "accuracy", "low", "high"])


def negative_label_units(counts, gt, pos_idx) -> dict[str, UnitStatistic]:
    """The negative-label metrics (``nmn``, ``pccn``, ``mean_negative_count`` and the classic ones) as reductions
    of per-image columns: resampling images gives their bootstrap intervals.

    Example:
        >>> u = negative_label_units([[4.0, 1.0, 3.0], [2.0, 0.0, 2.0]], gt=[4, 2], pos_idx=[0, 1])
        >>> u["nmn"].value(), u["pccn"].value()
        (0.75, 50.0)
    """
    counts = _as_float(counts, "counts", 2)
    gt = _as_float(gt, "gt", 1)
    pos_idx = np.asarray(pos_idx, dtype=np.int64)
    n, c = counts.shape
    pos = counts[np.arange(n), pos_idx]
    neg_mean = (counts.sum(axis=1) - pos) / (c - 1)
    out = classic_units(pos, gt)
    out["nmn"] = UnitStatistic((np.where(gt > 0, _ratio(neg_mean, gt), np.nan),), bs.mean)
    out["pccn"] = UnitStatistic(((np.abs(pos - gt) < np.abs(neg_mean - gt)).astype(float),), bs.percent)
    out["mean_negative_count"] = UnitStatistic((neg_mean,), bs.mean)  # every image has c - 1 negatives
    return out


def mosaic_units(upper, lower, gt, pos_counts) -> dict[str, UnitStatistic]:
    """The mosaic metrics (``cnt_*``, ``count_drift_*``) as reductions of per-image columns (an image's mosaics
    stay together when images are resampled).

    Example:
        >>> nan = float("nan")
        >>> u = mosaic_units([[nan, 15.0], [2.0, nan]], [[nan, 0.0], [2.0, nan]], [15, 4], [15.0, 4.0])
        >>> u["cnt_precision"].value(), u["count_drift_mean"].value()
        (0.75, 0.25)
    """
    precision, recall, f1 = mosaic_precision_recall(upper, lower, gt)
    drift = count_drift(upper, pos_counts)
    defined = ~np.isnan(drift)
    return {
        "cnt_precision": UnitStatistic((_nanmean(precision, axis=1),), bs.mean),
        "cnt_recall": UnitStatistic((_nanmean(recall, axis=1),), bs.mean),
        "cnt_f1": UnitStatistic((_nanmean(f1, axis=1),), bs.mean),
        "count_drift_mean": UnitStatistic((np.where(defined, drift, 0.0).sum(axis=1), defined.sum(axis=1) * 1.0),
                                          bs.ratio),
        "count_drift_median": bs.pooled_median_units(drift),
    }


def localized_units(pred_cells, gt_cells, image_index, grids=GRIDS) -> dict[str, UnitStatistic]:
    """The ``loc_*`` metrics of ``localized_mosaic_metrics`` as reductions of per-image columns (images in the
    order of ``np.unique(image_index)``)."""
    pred = np.clip(np.asarray(pred_cells, np.float64), 0, None)
    gt = np.asarray(gt_cells, np.float64)
    idx = np.asarray(image_index)
    out = {}
    for n in grids:
        for key, per_image in _localized_per_image(coarsen(pred, n), coarsen(gt, n), idx).items():
            metric, average = key.split("_")
            out[f"loc_{metric}_{average}_{n}x{n}"] = UnitStatistic((per_image,), bs.mean)
    return out


def error_per_number(pred, gt) -> list[dict]:
    """MAE per ground-truth number (CountBench's breakdown), ascending numbers; the accuracy per number is
    ``accuracy_by`` over ``exact_count_hits``, as the classic test tabulates it.

    Example:
        >>> error_per_number([2.0, 3.0, 2.0], [2, 3, 3])
        [{'number': 2, 'n_images': 1, 'mae': 0.0}, {'number': 3, 'n_images': 2, 'mae': 0.5}]
    """
    pred, gt = _as_float(pred, "pred", 1), _as_float(gt, "gt", 1)
    if pred.shape != gt.shape:
        raise ValueError(f"pred {pred.shape} and gt {gt.shape} must have the same shape")
    return [{"number": int(number), "n_images": int((gt == number).sum()),
             "mae": float(np.mean(np.abs(pred[gt == number] - number)))} for number in np.unique(gt)]
