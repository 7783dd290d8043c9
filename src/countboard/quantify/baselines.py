"""Comparison baselines for BCC: adjusted classify & count (ACC) and a prediction-powered interval (PPI).

Both take the same counts as ``bcc.fit_bcc``: the confusion counts ``tp, fn, fp, tn`` of the classifier against
the ``B`` human labels, and ``s_m`` classifier positives among the ``n_m`` items without a human label.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from countboard.quantify.bcc import check_counts
from countboard.quantify.errors import QuantifyInputError


def acc_estimate(tp: int, fn: int, fp: int, tn: int, s_m: int, n_m: int) -> float:
    """Adjusted classify & count (Forman 2008): ``(r - fpr) / (tpr - fpr)`` clipped to ``[0, 1]``.

    ``r = s_m / n_m`` is the classifier's positive rate on the unlabelled items; ``tpr = tp / (tp + fn)`` and
    ``fpr = fp / (fp + tn)`` are point estimates from the human labels.

    Raises:
        QuantifyInputError: ``tp + fn = 0`` or ``fp + tn = 0`` (the rate the correction divides by is not
            estimated), or ``tpr = fpr`` (the classifier carries no signal and the correction divides by zero).

    Example:
        >>> round(acc_estimate(40, 10, 5, 45, 4500, 10_000), 6)  # tpr 0.8, fpr 0.1, r 0.45
        0.5
    """
    check_counts(tp, fn, fp, tn, s_m, n_m)
    if tp + fn == 0:
        raise QuantifyInputError("ACC needs a human positive among the calibration labels (tp + fn = 0): "
                                 "the TPR it divides by is not estimated; use BCC, which keeps a prior on it")
    if fp + tn == 0:
        raise QuantifyInputError("ACC needs a human negative among the calibration labels (fp + tn = 0): "
                                 "the FPR it subtracts is not estimated; use BCC, which keeps a prior on it")
    tpr, fpr = tp / (tp + fn), fp / (fp + tn)
    if tpr == fpr:
        raise QuantifyInputError(f"ACC is undefined when the estimated TPR equals the FPR ({tpr:.3f})")
    return float(np.clip((s_m / n_m - fpr) / (tpr - fpr), 0.0, 1.0))


def ppi_interval(tp: int, fn: int, fp: int, tn: int, s_m: int, n_m: int,
                 mass: float = 0.9) -> tuple[float, float, float]:
    """Prediction-powered estimate and normal-approximation interval of the success rate.

    Following Angelopoulos et al. (2023) for a mean: ``theta = r - Delta`` with ``r = s_m / n_m`` the classifier's
    positive rate on the unlabelled items and ``Delta = (fp - fn) / B`` the mean of ``decision - human`` on the
    labelled ones (the "rectifier"); the interval is ``theta +- z * sqrt(r (1 - r) / n_m + var(decision - human)
    / B)``, clipped to ``[0, 1]``.

    Returns:
        ``(estimate, low, high)``.

    Example:
        >>> est, lo, hi = ppi_interval(40, 10, 5, 45, 4500, 10_000)
        >>> round(est, 3)
        0.5
    """
    check_counts(tp, fn, fp, tn, s_m, n_m)
    b = tp + fn + fp + tn
    if b < 2:
        raise QuantifyInputError(f"PPI needs at least two human labels to estimate the rectifier variance, got {b}")
    r = s_m / n_m
    rect = (fp - fn) / b
    rect_var = ((fp + fn) / b - rect**2) * b / (b - 1)
    se = np.sqrt(r * (1 - r) / n_m + rect_var / b)
    z = stats.norm.ppf(0.5 + mass / 2)
    est = r - rect
    return float(est), float(np.clip(est - z * se, 0, 1)), float(np.clip(est + z * se, 0, 1))
