"""Ranks that respect ties and uncertainty, tie groups, and P(A > B) between entries: pure functions shared by the
leaderboard and ``countboard publish``.

A rank range (``rank_ranges``) gives each entry the best and worst rank its interval allows; its best rank is
Chatbot Arena's rule (1 + the number of entries whose lower bound is above this entry's upper bound). Tie groups
(``tie_groups``) cut the ranking where intervals stop overlapping: entries whose intervals overlap, directly or
through a chain of overlapping entries, share a group.

For a rate with a posterior (BCC), P(A > B) is ``countboard.quantify.compare.pairwise_prob_greater`` (Beta
posteriors); an entry's interval or posterior draws are turned into a Beta by matching the mean and the variance.
For a bootstrap interval of any metric (a count error, a percentage), each entry is a normal with its value as
mean and the spread of its interval (``prob_greater_normal``).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from countboard.quantify.beta import beta_from_interval, beta_from_moments
from countboard.quantify.compare import pairwise_prob_greater


def competition_ranks(values, higher_is_better: bool) -> np.ndarray:
    """Rank 1 = best; equal values share the best of their ranks ("1224"); missing values rank last, unranked.

    Example:
        >>> competition_ranks([0.5, 0.9, 0.9, 0.1], True).tolist()
        [3.0, 1.0, 1.0, 4.0]
    """
    v = np.asarray(values, dtype=float)
    keyed = -v if higher_is_better else v
    out = stats.rankdata(np.where(np.isnan(keyed), np.inf, keyed), method="min").astype(float)
    out[np.isnan(v)] = np.nan
    return out


def rank_ranges(mean, low, high, higher_is_better: bool) -> tuple[np.ndarray, np.ndarray]:
    """Best and worst rank each entry could take given the intervals: entry j is surely ahead of i only when
    their intervals do not overlap (for higher-is-better: ``low_j > high_i``).

    Entries without an interval fall back to their point value as a zero-width interval, so equal values share a
    rank and distinct values without intervals get distinct ranks.

    Example:
        >>> best, worst = rank_ranges([0.8, 0.7, 0.3], [0.7, 0.6, 0.2], [0.9, 0.8, 0.4], True)
        >>> best.tolist(), worst.tolist()
        ([1.0, 1.0, 3.0], [2.0, 2.0, 3.0])
    """
    m = np.asarray(mean, dtype=float)
    # a missing bound, or one on the wrong side of the value, falls back to the value itself
    lo = np.fmin(np.where(np.isnan(np.asarray(low, dtype=float)), m, np.asarray(low, dtype=float)), m)
    hi = np.fmax(np.where(np.isnan(np.asarray(high, dtype=float)), m, np.asarray(high, dtype=float)), m)
    if not higher_is_better:
        m, lo, hi = -m, -hi, -lo
    ok = ~np.isnan(m)
    ahead = (lo[None, :] > hi[:, None]) & ok[None, :]   # [i, j]: j surely ahead of i
    behind = (hi[None, :] < lo[:, None]) & ok[None, :]  # [i, j]: j surely behind i
    n = ok.sum()
    best = 1.0 + ahead.sum(axis=1).astype(float)
    worst = float(n) - behind.sum(axis=1).astype(float)
    best[~ok] = np.nan
    worst[~ok] = np.nan
    return best, worst


def rank_label(best: float, worst: float) -> str:
    """``"2"``, or ``"1–3"`` when the intervals leave the rank open; ``"—"`` when there is no value.

    Example:
        >>> rank_label(1.0, 3.0), rank_label(2.0, 2.0), rank_label(float("nan"), float("nan"))
        ('1–3', '2', '—')
    """
    if np.isnan(best):
        return "—"
    return f"{int(best)}" if best == worst else f"{int(best)}–{int(worst)}"


def prob_greater_intervals(names, mean, low, high, level: float) -> np.ndarray:
    """``P[i, j] = P(A_i > A_j)`` from each entry's mean and ``level`` interval (independent Betas)."""
    ab = [beta_from_interval(float(m), float(lo), float(hi), level) for m, lo, hi in zip(mean, low, high, strict=True)]
    return pairwise_prob_greater(list(names), [a for a, _ in ab], [b for _, b in ab])


def prob_greater_draws(names, draws: list[np.ndarray]) -> np.ndarray:
    """``P[i, j] = P(A_i > A_j)`` from each entry's posterior draws (moment-matched Betas, independent)."""
    ab = [beta_from_moments(np.asarray(d, dtype=float)) for d in draws]
    return pairwise_prob_greater(list(names), [a for a, _ in ab], [b for _, b in ab])


def prob_greater_normal(mean, low, high, level: float) -> np.ndarray:
    """``P[i, j] = P(A_i > A_j)`` with each entry a normal of its value and the standard deviation that makes
    ``[low, high]`` its central ``level`` interval (entries independent); two entries without spread are
    compared by value (1, 0, or 0.5 when equal).

    Example:
        >>> p = prob_greater_normal([0.5, 0.5, 0.2], [0.4, 0.4, 0.1], [0.6, 0.6, 0.3], 0.9)
        >>> p[0, 1].round(2), bool(p[0, 2] > 0.99)
        (0.5, True)
    """
    m = np.asarray(mean, dtype=float)
    z = float(stats.norm.ppf(0.5 + level / 2))
    sd = (np.asarray(high, dtype=float) - np.asarray(low, dtype=float)) / (2 * z)
    diff = m[:, None] - m[None, :]
    spread = np.sqrt(sd[:, None] ** 2 + sd[None, :] ** 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(spread > 0, stats.norm.cdf(diff / np.where(spread > 0, spread, 1.0)),
                     np.where(diff > 0, 1.0, np.where(diff < 0, 0.0, 0.5)))
    return p


#: The rule of ``tie_groups`` and of the best end of ``rank_ranges``, in words, for the pages that show them.
TIE_RULE = ("Rank: 1 + the number of entries whose interval lies entirely above this entry's (Chatbot Arena's "
            "rule; the first number of a rank range). Tie group: entries whose intervals overlap, directly or "
            "through a chain of overlapping entries, share a group; groups are numbered from the best.")


def _oriented(mean, low, high, higher_is_better: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values and bounds turned so that higher is better, a missing or misplaced bound replaced by the value."""
    m = np.asarray(mean, dtype=float)
    lo_in, hi_in = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    lo = np.fmin(np.where(np.isnan(lo_in), m, lo_in), m)
    hi = np.fmax(np.where(np.isnan(hi_in), m, hi_in), m)
    if not higher_is_better:
        m, lo, hi = -m, -hi, -lo
    return m, lo, hi


def tie_groups(mean, low, high, higher_is_better: bool) -> np.ndarray:
    """Tie group of each entry, 1 for the best: entries whose intervals overlap (touching counts) share a group,
    and so do entries linked by a chain of overlapping intervals; a new group starts where the next entry's upper
    bound is below every lower bound of the group so far. Entries without bounds are zero-width intervals at their
    value (equal values share a group); entries without a value get NaN.

    Example:
        >>> tie_groups([0.9, 0.8, 0.5, 0.45, 0.1], [0.85, 0.7, 0.4, 0.3, 0.0], [0.95, 0.86, 0.6, 0.5, 0.2], True).tolist()
        [1.0, 1.0, 2.0, 2.0, 3.0]
    """
    m, lo, hi = _oriented(mean, low, high, higher_is_better)
    out = np.full(len(m), np.nan)
    ok = np.flatnonzero(~np.isnan(m))
    group, floor = 0, np.inf
    for i in ok[np.lexsort((-m[ok], -hi[ok]))]:  # by upper bound, best first
        if hi[i] < floor:  # below every lower bound of the group so far: surely behind all of them
            group += 1
            floor = lo[i]
        else:
            floor = min(floor, lo[i])
        out[i] = group
    return out


def arena_ranks(mean, low, high, higher_is_better: bool) -> np.ndarray:
    """Chatbot Arena's rank: 1 + the number of entries whose lower bound is above this entry's upper bound (the
    best end of ``rank_ranges``).

    Example:
        >>> arena_ranks([0.9, 0.8, 0.5], [0.85, 0.7, 0.4], [0.95, 0.86, 0.6], True).tolist()
        [1.0, 1.0, 3.0]
    """
    return rank_ranges(mean, low, high, higher_is_better)[0]


def ranks_within(codes, mean, low, high, higher_is_better: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best rank, worst rank and tie group of each entry within its group (``codes``: one integer per entry; models
    are only compared on the same data). With bounds (``low``/``high`` not None) the ranks are ``rank_ranges``;
    without, ties share a rank (``competition_ranks``) and a group.

    Example:
        >>> best, worst, group = ranks_within([0, 0, 1], [0.9, 0.5, 0.1], [0.8, 0.4, 0.0], [1.0, 0.85, 0.2], True)
        >>> best.tolist(), worst.tolist(), group.tolist()
        ([1.0, 1.0, 1.0], [2.0, 2.0, 1.0], [1.0, 1.0, 1.0])
    """
    codes = np.asarray(codes)
    mean = np.asarray(mean, dtype=float)
    best, worst, group = (np.full(len(mean), np.nan) for _ in range(3))
    if not len(mean):
        return best, worst, group
    order = np.argsort(codes, kind="stable")
    for rows in np.split(order, np.flatnonzero(np.diff(codes[order])) + 1):
        if low is not None and high is not None:
            lo, hi = np.asarray(low, dtype=float)[rows], np.asarray(high, dtype=float)[rows]
            best[rows], worst[rows] = rank_ranges(mean[rows], lo, hi, higher_is_better)
        else:
            lo = hi = mean[rows]
            best[rows] = worst[rows] = competition_ranks(mean[rows], higher_is_better)
        group[rows] = tie_groups(mean[rows], lo, hi, higher_is_better)
    return best, worst, group
