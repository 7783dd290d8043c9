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

Images without a positive class are left out of everything; images without a negative class are left out of MNP,
NMN and PCCN (``mc_n_images`` says how many images were scored).
"""

from __future__ import annotations

import numpy as np

from countboard.metrics import bootstrap as bs
from countboard.metrics.bootstrap import UnitStatistic


def multiclass_metrics(pred, gt) -> dict[str, float]:
    """PrACo++ metrics of an ``(N, C)`` count matrix against ``(N, C)`` per-class ground truth.

    Example:
        >>> m = multiclass_metrics([[3.0, 1.0, 0.0]], [[3, 0, 0]])
        >>> m["mc_mnp_macro"], m["mc_nmn_macro"], m["mc_pccn_one_at_a_time"], m["mc_pccn_avg_gt"]
        (0.5, 0.16666666666666666, 100.0, 100.0)
    """
    pred = np.asarray(pred, np.float64)
    gt = np.asarray(gt, np.float64)
    if pred.shape != gt.shape or pred.ndim != 2:
        raise ValueError(f"pred {pred.shape} and gt {gt.shape} must both be (images, classes)")
    pos = gt > 0
    keep = pos.any(axis=1)
    pred, gt, pos = pred[keep], gt[keep], pos[keep]
    neg = ~pos
    n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
    total = np.where(pos, gt, 0).sum(axis=1)
    has_neg = n_neg > 0
    neg_sum = np.where(neg, pred, 0).sum(axis=1)
    err = np.where(pos, pred - gt, 0.0)
    d_pos = np.abs(err).sum(axis=1) / n_pos
    out = {"mc_n_images": float(keep.sum())}
    nan = float("nan")
    if has_neg.any():
        mean_neg = neg_sum[has_neg] / n_neg[has_neg]
        out["mc_mnp_macro"] = float(mean_neg.mean())
        out["mc_mnp_micro"] = float(neg_sum.sum() / n_neg.sum())
        out["mc_nmn_macro"] = float((mean_neg / total[has_neg]).mean())
        out["mc_nmn_micro"] = float(neg_sum.sum() / (n_neg * total).sum())
        # |gt[i, c] - pred[i, n]| for every positive c and negative n of each image
        gap = np.abs(gt[:, :, None] - pred[:, None, :])
        pair = pos[:, :, None] & neg[:, None, :]
        one_at_a_time = np.where(pair, gap, 0).sum(axis=(1, 2)) / np.maximum(n_pos * n_neg, 1)
        avg_gt = np.abs((total / n_pos)[:, None] - pred)
        avg_gt = np.where(neg, avg_gt, 0).sum(axis=1) / np.maximum(n_neg, 1)
        out["mc_pccn_one_at_a_time"] = float(100 * np.mean((d_pos < one_at_a_time)[has_neg]))
        out["mc_pccn_avg_gt"] = float(100 * np.mean((d_pos < avg_gt)[has_neg]))
    else:
        out.update(dict.fromkeys(("mc_mnp_macro", "mc_mnp_micro", "mc_nmn_macro", "mc_nmn_micro",
                                  "mc_pccn_one_at_a_time", "mc_pccn_avg_gt"), nan))
    if keep.any():
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
    pred = np.asarray(pred, np.float64)
    gt = np.asarray(gt, np.float64)
    if pred.shape != gt.shape or pred.ndim != 2:
        raise ValueError(f"pred {pred.shape} and gt {gt.shape} must both be (images, classes)")
    pos = gt > 0
    keep = pos.any(axis=1)
    pred, gt, pos = pred[keep], gt[keep], pos[keep]
    neg = ~pos
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
