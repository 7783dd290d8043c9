"""Bootstrap intervals of a metric over the units of a run (images, samples): seeded, vectorised, pure numpy.

A metric is written as a *unit statistic*: per-unit columns (arrays whose first axis is the units) and a function
that reduces them over the unit axis. The function receives the columns with a leading resample axis, shape
``(B, n, ...)``, and returns ``(B,)``; the metric itself is the function on the columns with ``B = 1``. Units are
resampled with replacement, the same resamples for every statistic of a run (so the intervals of one run are
computed together, once, at summarize time); undefined units (NaN) drop out as they do from the metric.

- ``percentile``: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the resampled statistic.
- ``bca``: bias-corrected and accelerated (Efron 1987): the quantiles are shifted by the share of resamples below
  the estimate and by the jackknife skewness of the statistic.

To give a metric an interval: build its ``UnitStatistic`` beside the metric (e.g. ``counting.negative_label_units``)
and declare ``interval: {bootstrap: <units>}`` on its key in ``countboard/schema/*.yaml``; the bounds are logged
as ``<key>__low`` and ``<key>__high``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from countboard.schema import BOUND_SUFFIXES

N_RESAMPLES = 2000
LEVEL = 0.9
SEED = 0
METHODS = ("percentile", "bca")
LOW_SUFFIX, HIGH_SUFFIX = BOUND_SUFFIXES  # the schema declares the bounds under these keys
# elements gathered per resampling chunk (per column): bounds the memory of a run with many units
_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class UnitStatistic:
    """Per-unit ``columns`` (first axis: units) and the ``reduce`` that makes the metric of them.

    ``resampled``, when set, computes the statistic of resamples straight from their unit indices ``(B, n)``, with
    the same values as ``reduce`` on the gathered columns, faster (e.g. ``pooled_median_units``)."""

    columns: tuple[np.ndarray, ...]
    reduce: Callable[..., np.ndarray]
    resampled: Callable[[np.ndarray], np.ndarray] | None = None

    def of_resamples(self, idx: np.ndarray) -> np.ndarray:
        """The statistic of each resample ``idx[b]`` (unit indices), ``(B,)``."""
        if self.resampled is not None:
            return self.resampled(idx)
        return self.reduce(*(c[idx] for c in self.columns))

    def value(self) -> float:
        return float(self.reduce(*(c[None] for c in self.columns))[0])


# --- reductions over the unit axis (axis 1 of (B, n, ...) arrays) ----------------------------------------------


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1)


def mean(x: np.ndarray) -> np.ndarray:
    """Mean of the defined values of each resample (NaN where none is)."""
    x = _flat(x)
    n = (~np.isnan(x)).sum(axis=1)
    s = np.where(np.isnan(x), 0.0, x).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def percent(x: np.ndarray) -> np.ndarray:
    """100 x the mean of 0/1 values."""
    return 100.0 * mean(x)


def root_mean(x: np.ndarray) -> np.ndarray:
    """Square root of the mean (RMSE from squared errors)."""
    return np.sqrt(mean(x))


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Sum of ``num`` over sum of ``den`` (units where either is NaN left out); NaN when the sum of ``den`` is 0."""
    num, den = _flat(num), _flat(den)
    ok = ~(np.isnan(num) | np.isnan(den))
    s_num, s_den = np.where(ok, num, 0.0).sum(axis=1), np.where(ok, den, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s_den != 0, s_num / np.where(s_den != 0, s_den, 1.0), np.nan)


def root_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Square root of ``ratio`` (a pooled RMSE)."""
    return np.sqrt(ratio(num, den))


def pooled_median(x: np.ndarray) -> np.ndarray:
    """Median of the defined values of every unit's row pooled (a per-mosaic median, units = images)."""
    x = _flat(x)
    out = np.full(x.shape[0], np.nan)
    has = (~np.isnan(x)).any(axis=1)
    if has.any():
        out[has] = np.nanmedian(x[has], axis=1)
    return out


def pooled_median_units(x) -> UnitStatistic:
    """``pooled_median`` of per-unit rows ``x`` (first axis: units), resampled without gathering the rows.

    The defined values are sorted once and cut into blocks of about sqrt(m) consecutive values, with how many
    values of each unit fall in each block. A resample's counts per block are its draws of each unit times that
    table (one product for all resamples); the middle ranks are found first among the blocks, then among the
    values of the block they fall in, each weighed by how often its unit was drawn. The median is the mean of the
    two middle values (one value twice when their count is odd), as ``np.nanmedian`` takes it: the same values as
    ``pooled_median`` on the gathered rows, without a sort or a partition of every resample.

    Example:
        >>> u = pooled_median_units([[1.0, float("nan")], [5.0, 3.0], [2.0, 4.0]])
        >>> u.value(), u.of_resamples(np.array([[0, 0, 1], [2, 2, 2], [0, 0, 0]])).tolist()
        (3.0, [2.0, 3.0, 1.0])
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    flat = x.reshape(n, -1)
    defined = ~np.isnan(flat)
    owner = np.broadcast_to(np.arange(n)[:, None], flat.shape)[defined]
    order = np.argsort(flat[defined], kind="stable")
    values, owner = flat[defined][order], owner[order]
    m = values.size
    n_blocks = max(1, int(np.sqrt(m)))
    starts = np.linspace(0, m, n_blocks + 1).astype(np.int64)  # block k holds sorted positions starts[k]:starts[k+1]
    block = np.searchsorted(starts, np.arange(m), side="right") - 1
    per_unit = np.bincount(owner * n_blocks + block, minlength=n * n_blocks).reshape(n, n_blocks).astype(np.float64)
    width = int(np.diff(starts).max()) if m else 0

    def resampled(idx: np.ndarray) -> np.ndarray:
        b = len(idx)
        if not m:
            return np.full(b, np.nan)
        rows = np.arange(b)
        drawn = np.bincount((idx + n * rows[:, None]).ravel(), minlength=b * n).reshape(b, n).astype(np.float64)
        # values drawn per block, exact (integers far below 2**53); einsum's own loop, not BLAS, whose threads only
        # contend with each other on a busy machine
        in_block = np.einsum("bn,nk->bk", drawn, per_unit, optimize=False)
        upto = np.cumsum(in_block, axis=1)
        total = upto[:, -1]

        def position(rank: np.ndarray) -> np.ndarray:
            """Sorted position of the value of rank ``rank`` (0-based) in each resample."""
            k = np.minimum((upto <= rank[:, None]).sum(axis=1), n_blocks - 1)
            pos = starts[k][:, None] + np.arange(width)
            inside = pos < starts[k + 1][:, None]
            pos = np.minimum(pos, m - 1)
            counts = np.where(inside, drawn[rows[:, None], owner[pos]], 0.0)
            before = upto[rows, k] - in_block[rows, k]
            j = np.minimum((before[:, None] + np.cumsum(counts, axis=1) <= rank[:, None]).sum(axis=1), width - 1)
            return pos[rows, j]

        out = (values[position((total - 1) // 2)] + values[position(total // 2)]) / 2
        return np.where(total > 0, out, np.nan)

    return UnitStatistic((x,), pooled_median, resampled)


# --- resampling -------------------------------------------------------------------------------------------------


def bootstrap_distribution(stat: UnitStatistic, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> np.ndarray:
    """The statistic on ``n_resamples`` resamples of the units, ``(n_resamples,)``."""
    return _resampled({"s": stat}, n_resamples, seed)["s"]


def _resampled(stats: Mapping[str, UnitStatistic], n_resamples: int, seed: int) -> dict[str, np.ndarray]:
    n = _n_units(stats)
    rng = np.random.default_rng(seed)
    out = {k: np.empty(n_resamples) for k in stats}
    width = max(int(np.prod(c.shape)) for s in stats.values() for c in s.columns)
    step = max(1, _CHUNK_ELEMENTS // max(width, 1))
    for start in range(0, n_resamples, step):
        idx = rng.integers(0, n, size=(min(step, n_resamples - start), n))
        for key, s in stats.items():
            out[key][start:start + len(idx)] = s.of_resamples(idx)
    return out


def _n_units(stats: Mapping[str, UnitStatistic]) -> int:
    sizes = {len(c) for s in stats.values() for c in s.columns}
    if len(sizes) != 1:
        raise ValueError(f"every column of the statistics must have one row per unit, got lengths {sorted(sizes)}")
    return sizes.pop()


def _jackknife(stat: UnitStatistic) -> np.ndarray:
    """The statistic with each unit left out, ``(n,)``."""
    n = len(stat.columns[0])
    out = np.empty(n)
    keep = ~np.eye(n, dtype=bool)
    width = max(int(np.prod(c.shape)) for c in stat.columns)
    step = max(1, _CHUNK_ELEMENTS // max(width, 1))
    for start in range(0, n, step):
        rows = np.nonzero(keep[start:start + step])[1].reshape(-1, n - 1)
        out[start:start + len(rows)] = stat.of_resamples(rows)
    return out


def _bounds(dist: np.ndarray, estimate: float, level: float, method: str, stat: UnitStatistic) -> tuple[float, float]:
    dist = dist[~np.isnan(dist)]
    if not dist.size or np.isnan(estimate):
        return float("nan"), float("nan")
    alpha = np.array([(1 - level) / 2, (1 + level) / 2])
    if method == "bca":
        below = (dist < estimate).mean() + (dist == estimate).mean() / 2
        z0 = float(ndtri(np.clip(below, 1e-12, 1 - 1e-12)))
        jack = _jackknife(stat)
        jack = jack[~np.isnan(jack)]
        d = jack.mean() - jack
        den = 6.0 * (d**2).sum() ** 1.5
        a = float((d**3).sum() / den) if den > 0 else 0.0
        z = ndtri(alpha)
        alpha = ndtr(z0 + (z0 + z) / (1 - a * (z0 + z)))
        alpha = np.where(np.isnan(alpha), np.array([(1 - level) / 2, (1 + level) / 2]), alpha)
    lo, hi = np.quantile(dist, alpha)
    return float(lo), float(hi)


def bootstrap_interval(stat: UnitStatistic, level: float = LEVEL, n_resamples: int = N_RESAMPLES, seed: int = SEED,
                       method: str = "percentile") -> tuple[float, float]:
    """Equal-tailed ``level`` bootstrap interval of a unit statistic; ``(nan, nan)`` with fewer than 2 units.

    Example:
        >>> s = UnitStatistic((np.array([1.0, 2.0, 3.0, 4.0, 10.0]),), mean)
        >>> lo, hi = bootstrap_interval(s, level=0.9, seed=0)
        >>> lo < s.value() < hi, round(s.value(), 1)
        (True, 4.0)
    """
    return unit_intervals({"m": stat}, level, n_resamples, seed, method)["m"]


def unit_intervals(stats: Mapping[str, UnitStatistic], level: float = LEVEL, n_resamples: int = N_RESAMPLES,
                   seed: int = SEED, method: str = "percentile") -> dict[str, tuple[float, float]]:
    """``bootstrap_interval`` of several statistics of the same units, from the same resamples."""
    if method not in METHODS:
        raise ValueError(f"bootstrap method {method!r}: use one of {', '.join(METHODS)}")
    if not 0 < level < 1:
        raise ValueError(f"interval level must be in (0, 1), got {level}")
    if not stats:
        return {}
    if _n_units(stats) < 2:
        return {k: (float("nan"), float("nan")) for k in stats}
    dists = _resampled(stats, int(n_resamples), seed)
    return {k: _bounds(dists[k], s.value(), level, method, s) for k, s in stats.items()}


def interval_metrics(stats: Mapping[str, UnitStatistic], **options) -> dict[str, float]:
    """``<key>__low`` and ``<key>__high`` of every statistic (``unit_intervals``' options), ready to log; an
    undefined interval (fewer than 2 units, or no unit where the metric is defined) is left out."""
    out = {}
    for key, (lo, hi) in unit_intervals(stats, **options).items():
        if not (np.isnan(lo) or np.isnan(hi)):
            out[key + LOW_SUFFIX], out[key + HIGH_SUFFIX] = lo, hi
    return out


def describe(n_resamples: int = N_RESAMPLES, seed: int = SEED, method: str = "percentile") -> str:
    """How a run's intervals were drawn: the value of its tag ``tracking.tags.BOOTSTRAP``.

    Example:
        >>> describe()
        'percentile, 2000 resamples, seed 0'
    """
    return f"{method}, {n_resamples} resamples, seed {seed}"
