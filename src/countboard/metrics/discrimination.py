"""Does a score tell two groups apart? Mann–Whitney U test and AUROC of scores against 0/1 labels.

GeckoNum's Table 3 asks whether an auto-eval metric scores correctly generated images (label 1) higher than
incorrect ones (label 0): the two-sided Mann–Whitney U test (normal approximation with tie correction and
continuity correction, as ``scipy.stats.mannwhitneyu(method="asymptotic")``) and the AUROC, ``U1 / (n1 n0)``, the
probability that a random correct image scores above a random incorrect one (ties count one half).
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr
from scipy.stats import rankdata

from countboard.metrics import bootstrap as bs
from countboard.metrics.bootstrap import UnitStatistic


def _split(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores and labels must be 1-D of one length, got {s.shape} and {y.shape}")
    ok = np.isfinite(s) & np.isfinite(y)
    return s[ok], y[ok].astype(bool)


def mann_whitney(scores, labels) -> tuple[float, float]:
    """``(U1, two-sided p)`` of the scores of label 1 against label 0; NaN when a group is empty.

    Example:
        >>> u, p = mann_whitney([0.9, 0.8, 0.7, 0.2, 0.1, 0.3], [1, 1, 1, 0, 0, 0])
        >>> u, round(p, 3)
        (9.0, 0.081)
    """
    s, y = _split(scores, labels)
    n1, n0 = int(y.sum()), int((~y).sum())
    if not n1 or not n0:
        return float("nan"), float("nan")
    ranks = rankdata(s)
    u1 = float(ranks[y].sum() - n1 * (n1 + 1) / 2)
    n = n1 + n0
    _, counts = np.unique(s, return_counts=True)
    sigma = np.sqrt(n1 * n0 / 12 * ((n + 1) - (counts**3 - counts).sum() / (n * (n - 1))))
    if sigma == 0:
        return u1, 1.0
    z = (abs(u1 - n1 * n0 / 2) - 0.5) / sigma
    return u1, float(min(1.0, 2 * ndtr(-z)))


def auroc(scores, labels) -> float:
    """Area under the ROC curve of ``scores`` for ``labels`` (``U1 / (n1 n0)``); NaN when a group is empty.

    Example:
        >>> auroc([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0])
        0.875
    """
    s, y = _split(scores, labels)
    n1, n0 = int(y.sum()), int((~y).sum())
    if not n1 or not n0:
        return float("nan")
    return mann_whitney(s, y)[0] / (n1 * n0)


def _auroc_rows(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """AUROC of each row of ``(B, n)`` scores and labels (a resample per row)."""
    s, y = s.reshape(len(s), -1), y.reshape(len(y), -1) > 0.5
    ranks = rankdata(s, axis=1)
    n1 = y.sum(axis=1).astype(np.float64)
    n0 = y.shape[1] - n1
    u1 = np.where(y, ranks, 0.0).sum(axis=1) - n1 * (n1 + 1) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n1 > 0) & (n0 > 0), u1 / (n1 * n0), np.nan)


def auroc_units(scores, labels) -> UnitStatistic:
    """``auroc`` as a statistic of units (``metrics.bootstrap``): resampling units gives its interval.

    Example:
        >>> round(auroc_units([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0]).value(), 3)
        0.875
    """
    s, y = _split(scores, labels)
    return UnitStatistic((s, y.astype(np.float64)), _auroc_rows)


def auroc_interval(scores, labels, level: float = bs.LEVEL, seed: int = bs.SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of ``auroc`` over units."""
    return bs.bootstrap_interval(auroc_units(scores, labels), level=level, seed=seed)
