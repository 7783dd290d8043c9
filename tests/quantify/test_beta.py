"""Beta quantities: hand-computed cases, scipy quadrature in x-space and Monte Carlo as direct implementations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from countboard.quantify import (
    QuantifyInputError,
    beta_from_interval,
    beta_from_moments,
    beta_interval,
    beta_mean,
    beta_var,
    cc_posterior,
    js_divergence_beta,
    prob_greater,
    sample_value,
)


def js_direct(a1, b1, a2, b2):
    """JS divergence by adaptive quadrature of the textbook formula over x in [0, 1]."""
    p, q = stats.beta(a1, b1), stats.beta(a2, b2)

    def integrand(x):
        fp, fq = p.pdf(x), q.pdf(x)
        m = (fp + fq) / 2
        out = 0.0
        if fp > 0:
            out += 0.5 * fp * np.log2(fp / m)
        if fq > 0:
            out += 0.5 * fq * np.log2(fq / m)
        return out

    lo = min(p.ppf(1e-12), q.ppf(1e-12))
    hi = max(p.isf(1e-12), q.isf(1e-12))
    points = sorted({p.mean(), q.mean(), p.median(), q.median()})
    return integrate.quad(integrand, lo, hi, limit=1000, points=points, epsabs=1e-10)[0]


def test_cc_posterior_hand_computed():
    assert cc_posterior(7, 10) == (8.0, 4.0)
    assert cc_posterior(0, 0) == (1.0, 1.0)
    assert beta_mean(*cc_posterior(7, 10)) == pytest.approx(8 / 12)


@pytest.mark.parametrize("args", [(-1, 10), (11, 10), (2.5, 10), (3, float("nan"))])
def test_cc_posterior_rejects_bad_counts(args):
    with pytest.raises(QuantifyInputError):
        cc_posterior(*args)


def test_beta_moments_roundtrip_and_hand_case():
    a, b = beta_from_moments(np.array([0.2, 0.4, 0.6]))  # mean 0.4, sample variance 0.04 -> common 5
    assert (a, b) == pytest.approx((2.0, 3.0))
    draws = np.random.default_rng(0).beta(30.0, 70.0, size=200_000)
    a, b = beta_from_moments(draws)
    assert a == pytest.approx(30.0, rel=0.02) and b == pytest.approx(70.0, rel=0.02)
    assert beta_mean(a, b) == pytest.approx(draws.mean())
    assert beta_var(a, b) == pytest.approx(draws.var(ddof=1))


@pytest.mark.parametrize("draws", [[0.5], [0.3, 0.3, 0.3], [0.0, 1.0, 0.0, 1.0], [0.2, 1.3], [0.1, np.nan]])
def test_beta_moments_rejects_impossible_draws(draws):
    with pytest.raises(QuantifyInputError):
        beta_from_moments(np.array(draws))


def test_beta_interval_uniform():
    assert beta_interval(1, 1, 0.9) == pytest.approx((0.05, 0.95))
    lo, hi = beta_interval(30, 70)
    assert stats.beta.cdf(hi, 30, 70) - stats.beta.cdf(lo, 30, 70) == pytest.approx(0.9)


def test_js_hand_cases():
    assert js_divergence_beta(3, 5, 3, 5) == 0.0
    assert js_divergence_beta(1000, 1, 1, 1000) == pytest.approx(1.0, abs=1e-9)
    # Beta(2, 1) (density 2x) against Beta(1, 2) (density 2 - 2x): closed form of the integral
    # 0.5 * int 2x log2(2x) + (2 - 2x) log2(2 - 2x) dx  (with m = 1) = 1/ln4 * ... computed symbolically:
    expected = 0.5 * 2 * integrate.quad(lambda x: 2 * x * np.log2(2 * x), 0, 1)[0]
    assert js_divergence_beta(2, 1, 1, 2) == pytest.approx(expected, abs=1e-6)
    assert js_divergence_beta(2, 5, 7, 3) == pytest.approx(js_divergence_beta(7, 3, 2, 5))


def test_js_against_direct_quadrature_on_seeded_params():
    rng = np.random.default_rng(42)
    cases = [tuple(rng.uniform(0.5, 400, size=4)) for _ in range(12)]
    cases += [(8000, 2000, 60, 42), (300, 700, 3, 7), (1, 1, 50, 50), (5e4, 5e4, 52, 48)]
    for args in cases:
        assert js_divergence_beta(*args) == pytest.approx(js_direct(*args), abs=2e-5), args
        assert 0.0 <= js_divergence_beta(*args) <= 1.0


def test_prob_greater_hand_and_symmetry():
    assert prob_greater(1, 1, 1, 1) == 0.5
    assert prob_greater(2, 1, 1, 1) == pytest.approx(2 / 3, abs=1e-9)
    assert prob_greater(1, 1, 50, 50) == pytest.approx(0.5, abs=1e-9)
    assert prob_greater(3, 9, 40, 7) + prob_greater(40, 7, 3, 9) == pytest.approx(1.0, abs=1e-9)


def test_prob_greater_against_monte_carlo():
    rng = np.random.default_rng(7)
    n = 400_000
    for _ in range(8):
        a1, b1, a2, b2 = rng.uniform(1, 300, size=4)
        mc = np.mean(rng.beta(a1, b1, n) > rng.beta(a2, b2, n))
        assert prob_greater(a1, b1, a2, b2) == pytest.approx(mc, abs=4e-3)
    # a very narrow Y inside a wide X
    mc = np.mean(rng.beta(3, 4, n) > rng.beta(6e4, 4e4, n))
    assert prob_greater(3, 4, 6e4, 4e4) == pytest.approx(mc, abs=4e-3)
    assert prob_greater(3, 4, 6e4, 4e4) == pytest.approx(stats.beta.sf(0.6, 3, 4), abs=1e-4)


@pytest.mark.parametrize("bad", [(0, 1, 1, 1), (1, -2, 1, 1), (1, 1, float("inf"), 1)])
def test_beta_functions_reject_bad_parameters(bad):
    with pytest.raises(QuantifyInputError):
        js_divergence_beta(*bad)
    with pytest.raises(QuantifyInputError):
        prob_greater(*bad)


def test_sample_value_hand_cases():
    assert sample_value(60.0, 42.0, 100, 10_100) == pytest.approx((2 / 10_000, 2.0))
    v, eas = sample_value(150.0, 27.2, 100, 10_000)
    assert eas == pytest.approx(77.2) and v == pytest.approx(77.2 / 9900)
    v, eas = sample_value(40.0, 27.37, 100, 10_000)  # the classifier widened the posterior
    assert eas < 0 and v < 0


@pytest.mark.parametrize("n_human,n_total", [(100, 100), (200, 100), (-1, 100)])
def test_sample_value_rejects_no_unlabelled_items(n_human, n_total):
    with pytest.raises(QuantifyInputError):
        sample_value(50.0, 52.0, n_human, n_total)


def test_beta_from_interval_hand_case_and_narrowing():
    # mean 0.5, 90% interval [0.4, 0.6]: sd = 0.1 / 1.6449 = 0.060796, k = 0.25 / sd^2 - 1 = 66.639
    a, b = beta_from_interval(0.5, 0.4, 0.6, 0.9)
    assert a == pytest.approx(33.319, abs=1e-3) and b == pytest.approx(a)
    assert beta_var(a, b) == pytest.approx((0.1 / stats.norm.ppf(0.95)) ** 2)
    a, b = beta_from_interval(0.5, 0.0, 1.0, 0.5)  # wider than any Beta: variance just under m(1 - m)
    assert beta_var(a, b) < 0.25 and a == pytest.approx(0.5 * (1 / 0.999 - 1))
    for bad in [(0.0, 0.1, 0.2), (0.5, 0.6, 0.4), (1.2, 0.1, 0.2)]:
        with pytest.raises(QuantifyInputError):
            beta_from_interval(*bad, 0.9)
