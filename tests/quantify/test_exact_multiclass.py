"""Exact multi-class BCC (importance sampling through q = pi @ theta): against closed-form posteriors of small
cells, the binary exact method, NUTS, coverage on simulated cells, Monte-Carlo error and the method choice."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln

from countboard.quantify import BCCWarning, QuantifyInputError, SamplerConfig, fit_bcc, fit_bcc_multiclass
from countboard.quantify.exact import ExactConfig
from countboard.quantify.exact_multiclass import fit_exact_multiclass, log_dirichlet
from tests.quantify.test_exact import HAND


def dirichlet_moment(alpha: np.ndarray, powers: np.ndarray) -> float:
    """``E[prod_i x_i ** n_i]`` under ``Dirichlet(alpha)``: ``B(alpha + n) / B(alpha)``."""
    return float(np.exp(gammaln(alpha + powers).sum() - gammaln((alpha + powers).sum())
                        - gammaln(alpha).sum() + gammaln(alpha.sum())))


def enumerated_posterior_mean(conf, s) -> np.ndarray:
    """Posterior mean of ``pi`` for a handful of unlabelled items, by summing over their true labels.

    ``prod_i q_{c_i} = sum_z prod_i pi_{z_i} theta[z_i, c_i]`` over every assignment ``z`` of a true label to each
    unlabelled item (classifier label ``c_i``); each term's prior expectation is a product of Dirichlet moments,
    since ``pi`` and the rows of ``theta`` are independent a priori.
    """
    conf = np.asarray(conf, dtype=float)
    n_labels = len(conf)
    a, b = conf.sum(axis=1) + 1, conf + 1
    decided = np.repeat(np.arange(n_labels), s)
    num, den = np.zeros(n_labels), 0.0
    for assignment in itertools.product(range(n_labels), repeat=len(decided)):
        z = np.array(assignment, dtype=int)
        n_pi = np.bincount(z, minlength=n_labels).astype(float)
        term = 1.0
        for k in range(n_labels):
            term *= dirichlet_moment(b[k], np.bincount(decided[z == k], minlength=n_labels))
        den += term * dirichlet_moment(a, n_pi)
        num += term * np.array([dirichlet_moment(a, n_pi + np.eye(n_labels)[j]) for j in range(n_labels)])
    return num / den


def test_log_dirichlet_matches_scipy():
    rng = np.random.default_rng(0)
    alpha = np.array([1.0, 2.5, 7.0])
    x = rng.dirichlet([1, 1, 1], size=5)
    np.testing.assert_allclose(log_dirichlet(x, alpha), [stats.dirichlet.logpdf(v, alpha) for v in x], rtol=1e-12)


def test_enumeration_is_the_prior_mean_without_items_and_bayes_rule_with_one():
    conf = [[3, 1, 0], [1, 2, 1], [0, 0, 4]]
    a = np.array([5.0, 5.0, 5.0])
    np.testing.assert_allclose(enumerated_posterior_mean(conf, [0, 0, 0]), a / a.sum())
    # one item labelled 2 by the classifier: E[pi_l q_2] / E[q_2], q_2 = sum_k pi_k theta[k, 2]
    b = np.array(conf, dtype=float) + 1
    t2 = b[:, 2] / b.sum(axis=1)
    second = (np.outer(a, a) + np.diag(a)) / (a.sum() * (a.sum() + 1))  # E[pi_l pi_k]
    np.testing.assert_allclose(enumerated_posterior_mean(conf, [0, 0, 1]), second @ t2 / (a / a.sum() @ t2))


@pytest.mark.parametrize("conf,s", [
    ([[3, 1, 0], [1, 2, 1], [0, 0, 4]], [2, 1, 3]),
    ([[6, 0, 1], [0, 1, 0], [2, 0, 2]], [1, 4, 1]),
    ([[4, 1], [2, 5]], [3, 5]),
])
def test_small_cells_match_the_enumerated_posterior(conf, s):
    r = fit_exact_multiclass(np.array(conf), np.array(s), ExactConfig(seed=3))
    exact = enumerated_posterior_mean(conf, s)
    assert np.all(np.abs(r.mean - exact) <= 4 * r.mcse + 1e-4), (r.mean, exact, r.mcse)
    assert r.ess >= 4000 and r.pi.shape == (2000, len(s))
    np.testing.assert_allclose(r.pi.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("k", range(len(HAND)))
def test_two_labels_match_the_binary_exact_method(k):
    tp, fn, fp, tn, s_m, n_m = (int(v) for v in HAND[k])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        binary = fit_bcc(tp, fn, fp, tn, s_m, n_m, allow_no_human_positives=True)
        multi = fit_bcc_multiclass([[tn, fp], [fn, tp]], [n_m - s_m, s_m], labels=["fail", "success"])
    assert multi.method == "exact" and multi.labels == ["fail", "success"]
    tol = 4 * np.hypot(binary.mcse[0], multi.mcse[1]) + 5e-4
    assert multi.mean[1] == pytest.approx(binary.mean[0], abs=tol)
    assert np.quantile(multi.draws[:, 1], [0.05, 0.95]) == pytest.approx(
        np.quantile(binary.draws[0], [0.05, 0.95]), abs=0.015)


def test_a_near_perfect_classifier_gives_the_dirichlet_of_all_labels():
    # theta ~ identity: the unlabelled items' classifier labels are their labels, pi ~ Dirichlet(a + s)
    conf, s = np.diag([4000, 3000, 3000]), np.array([500, 300, 200])
    r = fit_exact_multiclass(conf, s, ExactConfig(seed=0))
    alpha = conf.sum(axis=1) + 1 + s
    np.testing.assert_allclose(r.mean, alpha / alpha.sum(), atol=4 * r.mcse.max() + 2e-4)


def test_monte_carlo_error_matches_the_spread_over_seeds():
    conf, s = np.array([[27, 2, 1], [1, 2, 0], [0, 1, 2]]), np.array([2500, 300, 200])
    cfg = dict(proposals=1024, target_ess=1.0, max_proposals=3072)
    fits = [fit_exact_multiclass(conf, s, ExactConfig(**cfg, seed=i)) for i in range(40)]
    spread = np.std([f.mean for f in fits], axis=0, ddof=1)
    reported = np.median([f.mcse for f in fits], axis=0)
    assert np.all((spread / reported > 0.6) & (spread / reported < 1.6)), (spread, reported)


def test_seeded_fits_repeat_and_reach_the_target_ess():
    conf, s = [[30, 5, 5], [4, 20, 6], [2, 3, 25]], [3000, 3000, 3900]
    cfg = SamplerConfig(draws=500, chains=2, seed=4)
    first = fit_bcc_multiclass(conf, s, labels=["a", "b", "c"], sampler=cfg)
    again = fit_bcc_multiclass(conf, s, labels=["a", "b", "c"], sampler=cfg)
    np.testing.assert_array_equal(first.draws, again.draws)
    assert first.draws.shape == (1000, 3) and np.all(first.ess >= 4000) and np.all(np.isnan(first.rhat))
    assert first.mcse.max() < 0.002 and np.abs(first.draws.mean(axis=0) - first.mean).max() < 0.01
    assert list(first.idata.posterior.coords["label"].values) == ["a", "b", "c"]


def test_an_unknown_method_and_a_small_budget_are_reported():
    with pytest.raises(QuantifyInputError, match="auto, exact, nuts"):
        fit_bcc_multiclass([[5, 1], [1, 5]], [10, 10], method="gibbs")
    with pytest.warns(BCCWarning, match="ESS"):
        fit_bcc_multiclass([[27, 2, 1], [1, 2, 0], [0, 1, 2]], [2500, 300, 200],
                           exact=ExactConfig(proposals=64, target_ess=10_000, max_proposals=64))


def simulated_cells(n_cells: int, rng: np.random.Generator, n_labels: int = 3, n_human: int = 100,
                    n_total: int = 2000) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Cells drawn from the model's priors: ``pi`` and each row of ``theta`` uniform on the simplex."""
    cells = []
    for _ in range(n_cells):
        pi = rng.dirichlet(np.ones(n_labels))
        theta = rng.dirichlet(np.ones(n_labels), size=n_labels)
        truth = rng.choice(n_labels, size=n_total, p=pi)
        decided = np.array([rng.choice(n_labels, p=theta[t]) for t in truth])
        conf = np.zeros((n_labels, n_labels), dtype=int)
        np.add.at(conf, (truth[:n_human], decided[:n_human]), 1)
        cells.append((conf, np.bincount(decided[n_human:], minlength=n_labels), pi))
    return cells


@pytest.mark.slow
def test_exact_90_percent_intervals_cover_on_simulated_cells():
    # rates drawn from the model's priors: the exact posterior's intervals are calibrated by construction
    rng = np.random.default_rng(5)
    hits = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        for conf, s, pi in simulated_cells(150, rng):
            fit = fit_bcc_multiclass(conf, s, sampler=SamplerConfig(draws=500, chains=2, seed=1),
                                     exact=ExactConfig(target_ess=1000))
            lo, hi = np.quantile(fit.draws, [0.05, 0.95], axis=0)
            hits.append((lo <= pi) & (pi <= hi))
    coverage = np.mean(hits, axis=0)
    assert np.all((coverage >= 0.84) & (coverage <= 0.96)), coverage


@pytest.mark.slow
def test_exact_means_agree_with_nuts():
    cells = [([[30, 5, 5], [4, 20, 6], [2, 3, 25]], [3000, 3000, 3900]),
             ([[27, 2, 1], [1, 2, 0], [0, 1, 2]], [2500, 300, 200]),
             ([[40, 8, 2], [5, 25, 5], [1, 4, 10]], [4000, 3500, 1500])]
    for conf, s in cells:
        exact = fit_bcc_multiclass(conf, s, exact=ExactConfig(target_ess=20_000))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BCCWarning)
            nuts = fit_bcc_multiclass(conf, s, method="nuts",
                                      sampler=SamplerConfig(draws=3000, tune=1000, chains=2, seed=5))
        tol = 4 * np.hypot(exact.mcse, nuts.mcse) + 5e-4
        assert np.all(np.abs(exact.mean - nuts.mean) <= tol), (exact.mean, nuts.mean, tol)
        assert np.quantile(exact.draws, [0.05, 0.95], axis=0) == pytest.approx(
            np.quantile(nuts.draws, [0.05, 0.95], axis=0), abs=0.01)
