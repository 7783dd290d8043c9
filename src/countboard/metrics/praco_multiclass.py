"""PrACo++ multi-class metrics: each image holds several classes and is prompted with every class of the split.

For image ``i`` with counts ``pred[i, c]`` and ground truth ``gt[i, c]`` (0 where ``c`` is absent): the positive
set ``P_i = {c: gt[i, c] > 0}``, the negatives ``N_i`` the other classes, ``G_i = sum_{c in P_i} gt[i, c]``.

- MNP (mean negative prediction): macro = mean over images of ``mean_{c in N_i} pred``; micro = pooled
  ``sum_i sum_{c in N_i} pred / sum_i |N_i|``.
- NMN: macro = mean over images of ``mean_{c in N_i} pred / G_i``; micro =
  ``sum_i sum_{c in N_i} pred / sum_i |N_i| G_i``.
- MAE, RMSE over the positive classes: macro = mean over images of the per-image value; micro = over all pooled
  (image, positive class) pairs.
- PCCN (%), with ``d_pos = mean_{c in P_i} |pred - gt|``: "one at a time" counts an image when ``d_pos`` is below
  ``mean_{c in P_i} mean_{n in N_i} |gt[i, c] - pred[i, n]|``; "avg GT" when it is below
  ``mean_{n in N_i} |mean_{c in P_i} gt[i, c] - pred[i, n]|``.

Images without a positive class are left out of everything. An image holding every class of the split has no
negative class: ``all_class_images="leave_out"`` (the project's default) leaves it out of MNP, NMN (macro) and
PCCN; ``"count"`` (the authors' ``MulticlassStatisticsExtractor``) keeps it in the number of images those sums are
divided by, with nothing added (``official_multiclass_metrics``). ``mc_n_images`` says how many images were scored.

Localized (``multiclass_localized_metrics``), as the authors compute them for each (image, positive class): both
maps clipped at 0 per pixel, the predicted map resized to the ground truth's shape when they differ
(``zoom_keep_sum``: linear, corner pixels aligned, sum kept), cut into ``n x n`` cells of ``floor(H / n)`` pixels
with the last row and column taking the rest; per cell ``tp = min(p, g)``, ``fp = max(0, p - g)``,
``ae = |p - g|``, summed over cells. Then ``recall = TP / GT``, ``precision = TP / (TP + FP)``, F-score their
harmonic mean (undefined when either is 0 or undefined), ``mae = AE``; undefined values are left out of the means.
macro: mean over images of the mean over the image's positive classes; micro: mean over all (image, class) pairs.
"""

from __future__ import annotations

import numpy as np

from countboard.metrics import bootstrap as bs
from countboard.metrics.bootstrap import UnitStatistic
from countboard.metrics.praco_official import (
    OFFICIAL_GRIDS,
    official_grid_sums,
    official_localized_metrics,
    zoom_keep_sum,
)

#: How an image holding every class of the split enters MNP, NMN (macro) and PCCN.
ALL_CLASS_IMAGES = ("leave_out", "count")
#: Localized values per (image, class) and their ``multiclass_final_metrics`` names.
MC_LOCALIZED = {"mae": "MAE", "recall": "Recall", "precision": "Precision", "fscore": "Fscore"}
_FROM_OFFICIAL = {"total_mae": "mae", "recall": "recall", "precision": "precision", "f_score": "fscore"}

#: ``multiclass_final_metrics_<split>.csv`` column -> project metric key, in the released column order.
MC_CSV_COLUMNS: dict[str, str] = {
    "MNP_macro": "official_mc_mnp_macro", "MNP_micro": "mc_mnp_micro",
    "NMN_macro": "official_mc_nmn_macro", "NMN_micro": "mc_nmn_micro",
    "PCCN_oneatatime": "official_mc_pccn_one_at_a_time", "PCCN_avgGT": "official_mc_pccn_avg_gt",
    "MAE_macro": "mc_mae_macro", "MAE_micro": "mc_mae_micro",
    "RMSE_macro": "mc_rmse_macro", "RMSE_micro": "mc_rmse_micro",
}
for _n in OFFICIAL_GRIDS:
    for _metric, _col in MC_LOCALIZED.items():
        for _avg in ("macro", "micro"):
            MC_CSV_COLUMNS[f"Localized_{_col}_{_avg}_div{_n * _n}"] = f"mc_localized_{_metric}_{_avg}_div{_n * _n}"
#: The keys whose value depends on ``all_class_images`` (the authors' value is logged as ``official_<key>``).
CONVENTION_KEYS = ("mc_mnp_macro", "mc_nmn_macro", "mc_pccn_one_at_a_time", "mc_pccn_avg_gt")


def _images_with_a_positive(pred, gt) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``pred`` and ``gt`` as (images, classes) arrays, kept to the images holding a positive class, with their
    positive and negative masks."""
    pred = np.asarray(pred, np.float64)
    gt = np.asarray(gt, np.float64)
    if pred.shape != gt.shape or pred.ndim != 2:
        raise ValueError(f"pred {pred.shape} and gt {gt.shape} must both be (images, classes)")
    pos = gt > 0
    keep = pos.any(axis=1)
    pred, gt, pos = pred[keep], gt[keep], pos[keep]
    return pred, gt, pos, ~pos


def multiclass_metrics(pred, gt, all_class_images: str = "leave_out") -> dict[str, float]:
    """PrACo++ metrics of an ``(N, C)`` count matrix against ``(N, C)`` per-class ground truth.

    ``all_class_images``: ``leave_out`` (images without a negative class are not in MNP, NMN macro and PCCN) or
    ``count`` (they are counted in the divisor, as the authors' scorer does).

    Example:
        >>> m = multiclass_metrics([[3.0, 1.0, 0.0]], [[3, 0, 0]])
        >>> m["mc_mnp_macro"], m["mc_nmn_macro"], m["mc_pccn_one_at_a_time"], m["mc_pccn_avg_gt"]
        (0.5, 0.16666666666666666, 100.0, 100.0)
    """
    if all_class_images not in ALL_CLASS_IMAGES:
        raise ValueError(f"all_class_images={all_class_images!r}: use one of {', '.join(ALL_CLASS_IMAGES)}")
    pred, gt, pos, neg = _images_with_a_positive(pred, gt)
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    total = np.where(pos, gt, 0).sum(axis=1)
    has_neg = n_neg > 0
    neg_sum = np.where(neg, pred, 0).sum(axis=1)
    err = np.where(pos, pred - gt, 0.0)
    d_pos = np.abs(err).sum(axis=1) / n_pos
    out = {"mc_n_images": float(len(pred))}
    nan = float("nan")
    n_macro = len(pred) if all_class_images == "count" else int(has_neg.sum())
    if has_neg.any():
        mean_neg = neg_sum[has_neg] / n_neg[has_neg]
        out["mc_mnp_macro"] = float(mean_neg.sum() / n_macro)
        out["mc_mnp_micro"] = float(neg_sum.sum() / n_neg.sum())
        out["mc_nmn_macro"] = float((mean_neg / total[has_neg]).sum() / n_macro)
        out["mc_nmn_micro"] = float(neg_sum.sum() / (n_neg * total).sum())
        # |gt[i, c] - pred[i, n]| for every positive c and negative n of each image
        gap = np.abs(gt[:, :, None] - pred[:, None, :])
        pair = pos[:, :, None] & neg[:, None, :]
        one_at_a_time = np.where(pair, gap, 0).sum(axis=(1, 2)) / np.maximum(n_pos * n_neg, 1)
        avg_gt = np.abs((total / n_pos)[:, None] - pred)
        avg_gt = np.where(neg, avg_gt, 0).sum(axis=1) / np.maximum(n_neg, 1)
        out["mc_pccn_one_at_a_time"] = float(100 * (d_pos < one_at_a_time)[has_neg].sum() / n_macro)
        out["mc_pccn_avg_gt"] = float(100 * (d_pos < avg_gt)[has_neg].sum() / n_macro)
    else:
        out.update(dict.fromkeys(("mc_mnp_macro", "mc_mnp_micro", "mc_nmn_macro", "mc_nmn_micro",
                                  "mc_pccn_one_at_a_time", "mc_pccn_avg_gt"), nan))
    if len(pred):
        out["mc_mae_macro"] = float(d_pos.mean())
        out["mc_mae_micro"] = float(np.abs(err).sum() / n_pos.sum())
        out["mc_rmse_macro"] = float(np.sqrt((err**2).sum(axis=1) / n_pos).mean())
        out["mc_rmse_micro"] = float(np.sqrt((err**2).sum() / n_pos.sum()))
    else:
        out.update(dict.fromkeys(("mc_mae_macro", "mc_mae_micro", "mc_rmse_macro", "mc_rmse_micro"), nan))
    return out


def multiclass_units(pred, gt) -> dict[str, UnitStatistic]:
    """The metrics of ``multiclass_metrics`` as reductions of per-image columns (``metrics.bootstrap``): macro
    values are means of per-image values, micro values ratios of per-image sums.

    Example:
        >>> u = multiclass_units([[3.0, 1.0, 0.0], [2.0, 0.0, 4.0]], [[3, 0, 0], [2, 0, 2]])
        >>> u["mc_mnp_micro"].value(), u["mc_mae_macro"].value()
        (0.3333333333333333, 0.5)
    """
    pred, gt, pos, neg = _images_with_a_positive(pred, gt)
    n_pos, n_neg = pos.sum(axis=1).astype(float), neg.sum(axis=1).astype(float)
    total = np.where(pos, gt, 0).sum(axis=1)
    has_neg = n_neg > 0
    neg_sum = np.where(neg, pred, 0).sum(axis=1)
    err = np.where(pos, pred - gt, 0.0)
    d_pos = np.abs(err).sum(axis=1) / n_pos
    nan = np.full(len(pred), np.nan)
    mean_neg = np.where(has_neg, neg_sum / np.maximum(n_neg, 1), nan)
    gap = np.abs(gt[:, :, None] - pred[:, None, :])
    pair = pos[:, :, None] & neg[:, None, :]
    one_at_a_time = np.where(pair, gap, 0).sum(axis=(1, 2)) / np.maximum(n_pos * n_neg, 1)
    avg_gt = np.where(neg, np.abs((total / n_pos)[:, None] - pred), 0).sum(axis=1) / np.maximum(n_neg, 1)
    return {
        "mc_mnp_macro": UnitStatistic((mean_neg,), bs.mean),
        "mc_mnp_micro": UnitStatistic((neg_sum, n_neg), bs.ratio),
        "mc_nmn_macro": UnitStatistic((mean_neg / total,), bs.mean),
        "mc_nmn_micro": UnitStatistic((neg_sum, n_neg * total), bs.ratio),
        "mc_mae_macro": UnitStatistic((d_pos,), bs.mean),
        "mc_mae_micro": UnitStatistic((np.abs(err).sum(axis=1), n_pos), bs.ratio),
        "mc_rmse_macro": UnitStatistic((np.sqrt((err**2).sum(axis=1) / n_pos),), bs.mean),
        "mc_rmse_micro": UnitStatistic(((err**2).sum(axis=1), n_pos), bs.root_ratio),
        "mc_pccn_one_at_a_time": UnitStatistic((np.where(has_neg, (d_pos < one_at_a_time) * 1.0, nan),), bs.percent),
        "mc_pccn_avg_gt": UnitStatistic((np.where(has_neg, (d_pos < avg_gt) * 1.0, nan),), bs.percent),
    }


def official_multiclass_metrics(pred, gt) -> dict[str, float]:
    """The authors' values of the keys that depend on the all-class-image convention, as ``official_mc_*``.

    Example:
        >>> m = official_multiclass_metrics([[3.0, 1.0], [2.0, 2.0]], [[3, 0], [2, 2]])
        >>> m["official_mc_mnp_macro"], multiclass_metrics([[3.0, 1.0], [2.0, 2.0]], [[3, 0], [2, 2]])["mc_mnp_macro"]
        (0.5, 1.0)
    """
    counted = multiclass_metrics(pred, gt, all_class_images="count")
    return {f"official_{k}": counted[k] for k in CONVENTION_KEYS}


def localized_class_sums(pred_map, gt_map, grids=OFFICIAL_GRIDS) -> dict[int, np.ndarray]:
    """``{n: array([TP, FP, AE, GT])}`` of one (image, class) on each grid side ``n`` (see the module docstring).

    Example:
        >>> s = localized_class_sums(np.array([[2.0, 0.0], [0.0, 0.0]]), np.array([[1.0, 1.0], [0.0, 0.0]]), (2,))
        >>> s[2].tolist()
        [1.0, 1.0, 2.0, 2.0]
    """
    gt = np.clip(np.asarray(gt_map, np.float64), 0, None)
    pred = zoom_keep_sum(np.clip(np.asarray(pred_map, np.float64), 0, None), gt.shape)
    return official_grid_sums(pred, gt, grids)


def multiclass_localized_metrics(sums: dict[int, np.ndarray], image_index) -> dict[str, float]:
    """``mc_localized_{mae,recall,precision,fscore}_{macro,micro}_div{4,16,64}`` from ``localized_class_sums`` rows.

    Args:
        sums: ``{n: (M, 4)}`` rows ``[TP, FP, AE, GT]`` of ``M`` (image, positive class) pairs per grid side.
        image_index: ``(M,)`` image of each pair (macro averages per image first).

    Example:
        >>> m = multiclass_localized_metrics({2: np.array([[1.0, 1.0, 2.0, 2.0], [2.0, 0.0, 0.0, 2.0]])}, [0, 0])
        >>> m["mc_localized_recall_micro_div4"], m["mc_localized_mae_macro_div4"]
        (0.75, 1.0)
    """
    out = {}
    for key, value in official_localized_metrics(sums, image_index).items():
        metric, rest = key.removeprefix("official_localized_").split("_macro" if "_macro" in key else "_micro")
        avg = "macro" if "_macro" in key else "micro"
        out[f"mc_localized_{_FROM_OFFICIAL[metric]}_{avg}{rest}"] = value
    return out


def mc_final_metrics_row(model: str, metrics: dict[str, float]) -> dict[str, object]:
    """One row of ``multiclass_final_metrics_<split>.csv`` (released column names and order, 3 decimals; absent
    metrics are NaN)."""
    row: dict[str, object] = {"Model": model}
    row.update({col: float(np.round(metrics.get(key, float("nan")), 3)) for col, key in MC_CSV_COLUMNS.items()})
    return row
