"""Beta posteriors and the quantities the BCC study derives from them.

All functions are pure. Integrals over Beta densities (Jensen-Shannon divergence, ``P(X > Y)``) are computed by
Gauss-Legendre quadrature in the quantile space of one distribution, split at the other's quantiles so that a
narrow density inside a wide one is resolved; they are deterministic, unlike the Monte Carlo estimate of the
source study, and agree with it up to its sampling error.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import stats

from countboard.quantify.errors import QuantifyInputError

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(256)
#: Quantile levels of the second distribution where the first one's quantile axis is split.
_SPLIT_LEVELS = np.array([1e-9, 1e-6, 1e-3, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98, 1 - 1e-3, 1 - 1e-6, 1 - 1e-9])


def _check_counts(**counts: float) -> None:
    for name, value in counts.items():
        if not np.isfinite(value) or value < 0 or float(value) != int(value):
            raise QuantifyInputError(f"{name} must be a non-negative integer count, got {value!r}")


def _check_shape(**params: float) -> None:
    for name, value in params.items():
        if not np.isfinite(value) or value <= 0:
            raise QuantifyInputError(f"Beta parameter {name} must be a positive finite number, got {value!r}")


def cc_posterior(successes: int, n: int) -> tuple[float, float]:
    """Posterior ``Beta(s + 1, n - s + 1)`` of a rate after ``successes`` out of ``n`` under a uniform prior.

    Used for Classify & Count (``s`` = classifier positives over all ``N`` items) and for the human posterior
    (``s`` = human positives over the ``B`` labelled items).

    Example:
        >>> cc_posterior(7, 10)
        (8.0, 4.0)
    """
    _check_counts(successes=successes, n=n)
    if successes > n:
        raise QuantifyInputError(f"successes ({successes}) cannot exceed the number of items n ({n})")
    return float(successes + 1), float(n - successes + 1)


def beta_mean(a: float, b: float) -> float:
    """Mean ``a / (a + b)`` of ``Beta(a, b)``.

    Example:
        >>> round(beta_mean(8, 4), 4)
        0.6667
    """
    return a / (a + b)


def beta_var(a: float, b: float) -> float:
    """Variance ``ab / ((a + b)^2 (a + b + 1))`` of ``Beta(a, b)``.

    Example:
        >>> beta_var(1, 1) == 1 / 12
        True
    """
    return a * b / ((a + b) ** 2 * (a + b + 1))


#: A Beta needs a variance below m(1 - m); intervals wider than that are narrowed to just under it.
_MAX_VAR_SHARE = 0.999


def beta_from_interval(mean: float, low: float, high: float, level: float) -> tuple[float, float]:
    """Beta(a, b) with the mean ``mean`` and the variance of a normal whose central ``level`` interval is
    ``[low, high]`` (a rate in (0, 1)); an interval wider than any Beta allows is narrowed to just under it.

    Raises:
        QuantifyInputError: a mean outside (0, 1) or an empty interval.

    Example:
        >>> a, b = beta_from_interval(0.5, 0.4, 0.6, 0.9)
        >>> round(a / (a + b), 3), round(a, 1)
        (0.5, 33.3)
    """
    if not (0.0 < mean < 1.0) or not (high > low):
        raise QuantifyInputError(f"a Beta needs a rate in (0, 1) and a proper interval, got {mean} [{low}, {high}]")
    z = float(stats.norm.ppf(0.5 + level / 2))
    var = min(((high - low) / (2 * z)) ** 2, _MAX_VAR_SHARE * mean * (1 - mean))
    k = mean * (1 - mean) / var - 1.0
    return mean * k, (1 - mean) * k


def beta_from_moments(draws: np.ndarray) -> tuple[float, float]:
    """Beta parameters with the mean and variance of ``draws`` (method of moments).

    ``a = mu (mu (1 - mu) / var - 1)``, ``b = (1 - mu) (mu (1 - mu) / var - 1)``, with the sample variance
    (``ddof=1``).

    Raises:
        QuantifyInputError: fewer than two draws, draws outside ``[0, 1]``, or a variance that no Beta
            distribution has (zero, or at least ``mu (1 - mu)``).

    Example:
        >>> a, b = beta_from_moments(np.array([0.2, 0.4, 0.6]))
        >>> round(a, 3), round(b, 3)
        (2.0, 3.0)
    """
    x = np.asarray(draws, dtype=np.float64).ravel()
    if x.size < 2:
        raise QuantifyInputError(f"beta_from_moments needs at least two draws, got {x.size}")
    if not np.all(np.isfinite(x)) or x.min() < 0 or x.max() > 1:
        raise QuantifyInputError("beta_from_moments needs finite draws in [0, 1] (draws of a rate)")
    mu, var = float(x.mean()), float(x.var(ddof=1))
    if var <= 0 or var >= mu * (1 - mu):
        raise QuantifyInputError(
            f"draws with mean {mu:.6g} and variance {var:.6g} match no Beta distribution "
            "(the variance must lie strictly between 0 and mean * (1 - mean))"
        )
    common = mu * (1 - mu) / var - 1
    return mu * common, (1 - mu) * common


def beta_interval(a: float, b: float, mass: float = 0.9) -> tuple[float, float]:
    """Equal-tailed credible interval of ``Beta(a, b)`` holding ``mass``.

    Example:
        >>> [round(v, 3) for v in beta_interval(1, 1, 0.9)]
        [0.05, 0.95]
    """
    _check_shape(a=a, b=b)
    tail = (1 - mass) / 2
    lo, hi = stats.beta.ppf([tail, 1 - tail], a, b)
    return float(lo), float(hi)


class _Beta:
    """``stats.beta(a, b)``'s ``cdf``, ``ppf`` and ``logpdf`` (the same calls) without freezing a distribution,
    which builds a new distribution object and its docstring each time."""

    def __init__(self, a: float, b: float):
        self.a, self.b = a, b

    def cdf(self, x):
        return stats.beta.cdf(x, self.a, self.b)

    def ppf(self, u):
        return stats.beta.ppf(u, self.a, self.b)

    def logpdf(self, x):
        return stats.beta.logpdf(x, self.a, self.b)


def _expect(dist, func: Callable[[np.ndarray], np.ndarray], other) -> float:
    """``E[func(X)]`` for ``X ~ dist``, by quadrature over ``dist``'s quantiles split at ``other``'s quantiles."""
    cuts = np.concatenate([[0.0, 1.0], dist.cdf(other.ppf(_SPLIT_LEVELS))])
    cuts = np.unique(np.clip(cuts, 0.0, 1.0))
    lo, hi = cuts[:-1], cuts[1:]
    keep = hi - lo > 0
    lo, hi = lo[keep], hi[keep]
    # every segment's nodes in one call of ``ppf`` and of ``func`` (elementwise: the same values as one call per
    # segment), summed segment by segment in order
    u = lo[:, None] + (hi - lo)[:, None] * (_NODES + 1) / 2
    fx = np.asarray(func(dist.ppf(u)), dtype=np.float64).reshape(u.shape)
    total = 0.0
    for i in range(len(lo)):
        total += (hi[i] - lo[i]) / 2 * float(np.dot(_WEIGHTS, fx[i]))
    return total


def js_divergence_beta(a1: float, b1: float, a2: float, b2: float) -> float:
    """Jensen-Shannon divergence (base 2, in ``[0, 1]``) between ``Beta(a1, b1)`` and ``Beta(a2, b2)``.

    ``JS = KL(P || M) / 2 + KL(Q || M) / 2`` with ``M = (P + Q) / 2``; 0 for identical distributions, 1 when they
    do not overlap.

    Example:
        >>> js_divergence_beta(3, 5, 3, 5)
        0.0
        >>> round(js_divergence_beta(1000, 1, 1, 1000), 6)
        1.0
    """
    _check_shape(a1=a1, b1=b1, a2=a2, b2=b2)
    if (a1, b1) == (a2, b2):
        return 0.0
    p, q = _Beta(a1, b1), _Beta(a2, b2)
    ln2 = np.log(2.0)

    def term(x, own, rival):
        # log2(2 f / (f + g)) = 1 - log2(1 + g / f), evaluated in log space for concentrated densities
        # Nodes where a log density underflows to -inf sit in quantile intervals of width ~1e-19 or less,
        # around an integrable log singularity; they are given the value 0.
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            value = 1.0 - np.logaddexp(0.0, rival.logpdf(x) - own.logpdf(x)) / ln2
        return np.where(np.isfinite(value), value, 0.0)

    js = 0.5 * _expect(p, lambda x: term(x, p, q), q) + 0.5 * _expect(q, lambda x: term(x, q, p), p)
    return float(np.clip(js, 0.0, 1.0))


def prob_greater(a1: float, b1: float, a2: float, b2: float) -> float:
    """``P(X > Y)`` for independent ``X ~ Beta(a1, b1)`` and ``Y ~ Beta(a2, b2)``.

    Computed as ``E[F_Y(X)]`` (or ``1 - E[F_X(Y)]`` when ``Y`` is the narrower one, so that the integrand is
    smooth).

    Example:
        >>> prob_greater(1, 1, 1, 1)
        0.5
        >>> round(prob_greater(2, 1, 1, 1), 6)  # X has density 2x: integral of 2x * x over [0, 1]
        0.666667
    """
    _check_shape(a1=a1, b1=b1, a2=a2, b2=b2)
    if (a1, b1) == (a2, b2):
        return 0.5
    x, y = _Beta(a1, b1), _Beta(a2, b2)
    narrow_x = beta_var(a1, b1) <= beta_var(a2, b2)
    value = _expect(x, y.cdf, y) if narrow_x else 1.0 - _expect(y, x.cdf, x)
    return float(np.clip(value, 0.0, 1.0))


def sample_value(a: float, b: float, n_human: int, n_total: int) -> tuple[float, float]:
    """Sample value ``V`` and effective additional sample size ``EAS`` of a BCC posterior ``Beta(a, b)``.

    ``EAS = a + b - n_human`` (pseudo-observations beyond the human labels); ``V = EAS / (n_total - n_human)``,
    the information one classifier decision adds relative to one human label (1: as much, 0: none, negative:
    the classifier widened the posterior).

    Raises:
        QuantifyInputError: negative counts, or no items without a human label (``n_total <= n_human``).

    Example:
        >>> sample_value(60.0, 42.0, 100, 10_100)
        (0.0002, 2.0)
    """
    _check_shape(a=a, b=b)
    _check_counts(n_human=n_human, n_total=n_total)
    if n_total <= n_human:
        raise QuantifyInputError(
            f"sample value needs items without a human label: n_total ({n_total}) must exceed n_human ({n_human})"
        )
    eas = a + b - n_human
    return float(eas / (n_total - n_human)), float(eas)
