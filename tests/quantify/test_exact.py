"""Exact binary BCC (importance sampling through q): against a brute-force 3-D grid, against NUTS, coverage,
Monte-Carlo error, method choice and the reuse of compiled NUTS models."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from countboard.acs.datasets.simulated import simulate_counts
from countboard.quantify import BCCWarning, QuantifyInputError, SamplerConfig, fit_bcc_batch
from countboard.quantify import bcc as bcc_module
from countboard.quantify.exact import ExactConfig, fit_exact

FIELDS = ("tp", "fn", "fp", "tn", "s_m", "n_m")

# small cells (the grid resolves their posteriors), a lopsided classifier, extreme rates, a prior-only TPR
HAND = np.array([
    [12, 3, 4, 11, 40, 70],
    [5, 5, 2, 18, 60, 150],
    [18, 1, 0, 1, 90, 100],
    [1, 0, 6, 23, 15, 200],
    [0, 0, 9, 21, 30, 120],
    [25, 15, 10, 30, 80, 120],
])


def brute_force(tp, fn, fp, tn, s_m, n_m, n=200):
    """Posterior mean and 5% / 95% quantiles of p from the paper's model (eqs. 3-6) by the midpoint rule on an
    ``n``-point grid of each of p, tpr, fpr in (0, 1): the unnormalised joint density summed over tpr and fpr."""
    s_h, b = tp + fn, tp + fn + fp + tn
    x = (np.arange(n) + 0.5) / n
    log_t = stats.beta.logpdf(x, tp + 1, fn + 1)
    log_f = stats.beta.logpdf(x, fp + 1, tn + 1)
    log_p = stats.beta.logpdf(x, s_h + 1, b - s_h + 1)
    prior_tf = log_t[:, None] + log_f[None, :]
    log_marg = np.empty(n)
    for i, p in enumerate(x):
        q = x[:, None] * p + x[None, :] * (1 - p)
        ll = stats.binom.logpmf(s_m, n_m, q) + prior_tf
        top = ll.max()
        log_marg[i] = log_p[i] + top + np.log(np.exp(ll - top).sum())
    w = np.exp(log_marg - log_marg.max())
    w /= w.sum()
    cdf, upper = np.cumsum(w), x + 0.5 / n  # the cumulative mass up to each cell's upper edge
    return float(np.dot(w, x)), float(np.interp(0.05, cdf, upper)), float(np.interp(0.95, cdf, upper))


def as_counts(rows):
    rows = np.atleast_2d(rows)
    return {k: rows[:, i].astype(np.int64) for i, k in enumerate(FIELDS)}


def test_brute_force_grid_recovers_a_conjugate_case():
    # n_m = 0: the likelihood is flat, so p keeps its human posterior Beta(s_h + 1, B - s_h + 1)
    mean, lo, hi = brute_force(30, 0, 20, 0, 0, 0)
    assert mean == pytest.approx(31 / 52, abs=1e-3)
    assert (lo, hi) == pytest.approx(tuple(stats.beta.ppf([0.05, 0.95], 31, 21)), abs=3e-3)


@pytest.fixture(scope="module")
def hand_fit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        return fit_exact(as_counts(HAND), ExactConfig(seed=1, draws=20_000))


@pytest.mark.parametrize("k", range(len(HAND)))
def test_exact_matches_brute_force_integration(hand_fit, k):
    mean, lo, hi = brute_force(*HAND[k])
    assert hand_fit.mean[k] == pytest.approx(mean, abs=4 * hand_fit.mcse[k] + 5e-4)
    assert np.quantile(hand_fit.p[k], [0.05, 0.95]) == pytest.approx([lo, hi], abs=6e-3)
    assert hand_fit.ess[k] >= 4000 and hand_fit.mcse[k] < 0.002


def test_monte_carlo_error_matches_the_spread_over_seeds():
    counts = as_counts([40, 10, 5, 45, 4500, 9900])
    cfg = dict(proposals=1024, target_ess=1.0, max_proposals=4096)
    fits = [fit_exact(counts, ExactConfig(**cfg, seed=s)) for s in range(40)]
    spread = np.std([f.mean[0] for f in fits], ddof=1)
    reported = np.median([f.mcse[0] for f in fits])
    assert 0.6 < spread / reported < 1.6, (spread, reported)


def test_low_ess_cells_get_more_proposals_until_the_target():
    counts = as_counts([[40, 10, 5, 45, 4500, 9900], [2, 1, 30, 67, 3100, 9900]])
    fit = fit_exact(counts, ExactConfig(proposals=1024, target_ess=3000, seed=0))
    assert np.all(fit.ess >= 3000)
    assert np.all(fit.proposals > 1024 + 2048)  # the pilot and the first round were not enough at this target
    seeded = fit_exact(counts, ExactConfig(proposals=1024, target_ess=3000, seed=0))
    np.testing.assert_array_equal(fit.p, seeded.p)


def test_auto_is_exact_and_reports_ess_and_mcse():
    fit = fit_bcc_batch(*HAND[:2].T, cells=["a", "b"], sampler=SamplerConfig(draws=300, chains=2, seed=4))
    assert fit.method == "exact" and fit.draws.shape == (2, 600)
    assert np.all(fit.ess >= 4000) and np.all(fit.mcse < 0.002) and np.all(np.isnan(fit.rhat))
    assert fit.converged.all()
    assert list(fit.idata.posterior.coords["cell"].values) == ["a", "b"]
    np.testing.assert_allclose(fit.idata.sample_stats["mcse"].values, fit.mcse)
    assert abs(fit.draws.mean(axis=1) - fit.mean).max() < 0.01


def test_unknown_method_raises():
    with pytest.raises(QuantifyInputError, match="auto, exact, nuts"):
        fit_bcc_batch(*HAND[:1].T, method="mcmc")


def test_ess_below_minimum_warns():
    with pytest.warns(BCCWarning, match="ESS below"):
        fit_bcc_batch(*HAND[:1].T, exact=ExactConfig(proposals=64, target_ess=10_000, max_proposals=64))


def test_exact_90_percent_intervals_cover_on_simulated_cells():
    # rates drawn from the model's uniform priors: the exact posterior's intervals are calibrated by construction
    rng = np.random.default_rng(11)
    k = 300
    p, tpr, fpr = rng.uniform(0, 1, k), rng.uniform(0, 1, k), rng.uniform(0, 1, k)
    cells = simulate_counts(p, tpr, fpr, n_human=100, n_total=10_000, rng=rng)
    rows = np.array([[getattr(c, f) for f in FIELDS] for c in cells])
    keep = rows[:, 0] + rows[:, 1] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        fit = fit_bcc_batch(*rows[keep].T, sampler=SamplerConfig(draws=1000, chains=2, seed=2))
    lo, hi = np.quantile(fit.draws, [0.05, 0.95], axis=1)
    coverage = np.mean((lo <= p[keep]) & (p[keep] <= hi))
    assert 0.84 <= coverage <= 0.95, coverage


@pytest.mark.slow
def test_exact_means_agree_with_nuts():
    rng = np.random.default_rng(3)
    p, tpr, fpr = rng.uniform(0.1, 0.9, 6), rng.uniform(0.6, 0.95, 6), rng.uniform(0.05, 0.35, 6)
    rows = np.array([[getattr(c, f) for f in FIELDS]
                     for c in simulate_counts(p, tpr, fpr, n_human=100, n_total=10_000, rng=rng)])
    rows = np.vstack([rows, HAND[:2]])
    exact = fit_bcc_batch(*rows.T, method="exact")
    nuts = fit_bcc_batch(*rows.T, method="nuts", sampler=SamplerConfig(draws=2500, tune=1000, chains=2, seed=5))
    diff = np.abs(exact.mean - nuts.mean)
    assert diff.max() < 0.003, (diff, nuts.mcse)


def test_nuts_reuses_its_compiled_model_and_stays_reproducible():
    bcc_module.NUTS_CACHE.clear()
    cfg = SamplerConfig(draws=100, tune=100, chains=1, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        first = fit_bcc_batch(*HAND[:2].T, cells=["a", "b"], method="nuts", sampler=cfg)
        model, step = bcc_module.NUTS_CACHE[(2, cfg.target_accept)]
        other = fit_bcc_batch(*HAND[2:4].T, cells=["c", "d"], method="nuts", sampler=cfg)
        again = fit_bcc_batch(*HAND[:2].T, cells=["e", "f"], method="nuts", sampler=cfg)
    assert bcc_module.NUTS_CACHE[(2, cfg.target_accept)] == (model, step) and len(bcc_module.NUTS_CACHE) == 1
    assert list(other.idata.posterior.coords["cell"].values) == ["c", "d"]
    assert abs(other.mean[0] - first.mean[0]) > 0.05  # the new counts took effect
    np.testing.assert_array_equal(first.draws, again.draws)  # no state carried over from the fit in between
