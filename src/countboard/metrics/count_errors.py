"""Count errors as the 2026 counting benchmarks report them, beside MAE/RMSE/MAPE (``metrics.counting``).

Each is a pure numpy function of predicted counts ``pred`` and ground-truth counts ``gt`` (1-D, same length), with
its per-image column for a bootstrap interval (``count_error_units``). A prediction that is missing (NaN: a model
asked in words whose answer states no count) is wrong for every accuracy and scores CAPTURe's 100 in sMAPE; the
errors that need a number (``nmae``) leave it out.

- ``off_by_one_acc``: % of images with ``|round(p) - g| <= 1`` (Countix/RepCount's OBO; the count rounded half
  up, as ``exact_count_hits`` does).
- ``nmae``: mean of ``|p - g| / (g + 0.1)`` (Countix/RepCount's normalised MAE: an image with ``g = 0`` is
  divided by 0.1, not left out).
- ``smape``: CAPTURe's sMAPE (``eval.py`` of github:atinpothiraj/CAPTURe): mean over images of
  ``100 * |p - g| / (|p| + |g|)``, a missing prediction counting 100; ``p = g = 0`` is 0 (CAPTURe's script would
  divide by zero there; its counts are never 0).
- ``relaxed_acc_5`` / ``relaxed_acc_10``: CountQA's relaxed accuracy, % of images with ``|p - g| <= 0.05 g``
  (``0.10 g``), the count as stated (not rounded).
"""

from __future__ import annotations

import numpy as np

from countboard.metrics import bootstrap as bs
from countboard.metrics.bootstrap import UnitStatistic

RELAXED = (5, 10)
NMAE_OFFSET = 0.1


def _pair(pred, gt) -> tuple[np.ndarray, np.ndarray]:
    pred, gt = np.asarray(pred, dtype=np.float64), np.asarray(gt, dtype=np.float64)
    if pred.ndim != 1 or pred.shape != gt.shape:
        raise ValueError(f"pred {pred.shape} and gt {gt.shape} must be 1-D of the same length")
    return pred, gt


def off_by_one_hits(pred, gt) -> np.ndarray:
    """1.0 where the rounded count is within one of the ground truth, else 0.0 (a missing count is 0.0).

    Example:
        >>> off_by_one_hits([3.4, 5.0, 7.6, float("nan")], [4, 3, 9, 1]).tolist()
        [1.0, 0.0, 1.0, 0.0]
    """
    pred, gt = _pair(pred, gt)
    finite = np.isfinite(pred)
    rounded = np.floor(np.where(finite, pred, 0.0) + 0.5)
    return (finite & (np.abs(rounded - gt) <= 1)).astype(np.float64)


def normalised_errors(pred, gt) -> np.ndarray:
    """``|p - g| / (g + 0.1)`` per image (NaN where the count is missing).

    Example:
        >>> normalised_errors([2.0, 0.5], [4, 0]).round(3).tolist()
        [0.488, 5.0]
    """
    pred, gt = _pair(pred, gt)
    return np.abs(pred - gt) / (gt + NMAE_OFFSET)


def smape_terms(pred, gt) -> np.ndarray:
    """CAPTURe's per-image sMAPE term ``100 |p - g| / (|p| + |g|)``: 100 for a missing count, 0 when both are 0.

    Example:
        >>> smape_terms([3.0, 0.0, float("nan"), 0.0], [1, 2, 5, 0]).tolist()
        [50.0, 100.0, 100.0, 0.0]
    """
    pred, gt = _pair(pred, gt)
    den = np.abs(pred) + np.abs(gt)
    with np.errstate(invalid="ignore", divide="ignore"):
        terms = 100.0 * np.abs(pred - gt) / den
    terms = np.where(den == 0, 0.0, terms)
    return np.where(np.isfinite(pred), terms, 100.0)


def relaxed_hits(pred, gt, percent: float) -> np.ndarray:
    """1.0 where ``|p - g| <= percent / 100 * g`` (CountQA's relaxed accuracy), else 0.0.

    Example:
        >>> relaxed_hits([95.0, 94.0, 0.0, float("nan")], [100, 100, 0, 3], 5).tolist()
        [1.0, 0.0, 1.0, 0.0]
    """
    pred, gt = _pair(pred, gt)
    finite = np.isfinite(pred)
    # a tolerance in float64 with a guard against representation error (95 vs 100 * 0.05 = 5.000000000000001)
    within = np.abs(np.where(finite, pred, 0.0) - gt) <= percent / 100.0 * gt + 1e-9
    return (finite & within).astype(np.float64)


def count_error_metrics(pred, gt) -> dict[str, float]:
    """``off_by_one_acc``, ``nmae``, ``smape``, ``relaxed_acc_5`` and ``relaxed_acc_10`` (module docstring).

    Example:
        >>> m = count_error_metrics([2.0, 10.0], [2, 11])
        >>> m["off_by_one_acc"], round(m["nmae"], 4), round(m["smape"], 3), m["relaxed_acc_5"], m["relaxed_acc_10"]
        (100.0, 0.045, 2.381, 50.0, 100.0)
    """
    return {key: stat.value() if len(stat.columns[0]) else float("nan")
            for key, stat in count_error_units(pred, gt).items()}


def count_error_units(pred, gt) -> dict[str, UnitStatistic]:
    """The metrics of ``count_error_metrics`` as reductions of per-image columns (``metrics.bootstrap``).

    Example:
        >>> round(count_error_units([3.0], [1])["smape"].value(), 1)
        50.0
    """
    pred, gt = _pair(pred, gt)
    units = {"off_by_one_acc": UnitStatistic((off_by_one_hits(pred, gt),), bs.percent),
             "nmae": UnitStatistic((normalised_errors(pred, gt),), bs.mean),
             "smape": UnitStatistic((smape_terms(pred, gt),), bs.mean)}
    for percent in RELAXED:
        units[f"relaxed_acc_{percent}"] = UnitStatistic((relaxed_hits(pred, gt, percent),), bs.percent)
    return units
