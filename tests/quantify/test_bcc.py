"""BCC model: input rules, and the NUTS (PyMC) posterior against a direct grid integration of the same model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from countboard.acs.datasets.simulated import simulate_counts
from countboard.quantify import (
    BCCWarning,
    NoHumanPositivesError,
    QuantifyInputError,
    SamplerConfig,
    bcc_posterior,
    fit_bcc,
    fit_bcc_batch,
)
from countboard.quantify.bcc import validate_counts

FAST = SamplerConfig(draws=500, tune=500, chains=2, seed=3)

# (tp, fn, fp, tn, s_m, n_m): typical; no human positive; no human negative; few unlabelled items
CELLS = np.array([
    [40, 10, 5, 45, 4500, 9900],
    [0, 0, 20, 80, 2000, 9900],
    [30, 5, 0, 0, 7900, 9900],
    [12, 3, 4, 11, 40, 70],
])


def grid_posterior(tp, fn, fp, tn, s_m, n_m, n_p=300, n_t=160, n_f=600):
    """Posterior mean and 5% / 95% quantiles of p by summing the joint density over a (p, tpr, fpr) grid.

    Each axis spans its prior's central 1 - 2e-12 mass, wide enough for the likelihood to pull a rate into its
    prior's tail, and fine enough to resolve the likelihood, which is narrow in tpr p + fpr (1 - p).
    """
    s_h, b = tp + fn, tp + fn + fp + tn

    def axis(a, bb, n):
        lo, hi = stats.beta.ppf([1e-12, 1 - 1e-12], a, bb)
        x = np.linspace(lo, hi, n)
        return x, stats.beta.logpdf(x, a, bb)

    p, lp = axis(s_h + 1, b - s_h + 1, n_p)
    t, lt = axis(tp + 1, fn + 1, n_t)
    f, lf = axis(fp + 1, tn + 1, n_f)
    prior_tf = lt[:, None] + lf[None, :]
    log_marg = np.empty(n_p)
    for i, pi in enumerate(p):
        q = np.clip(t[:, None] * pi + f[None, :] * (1 - pi), 1e-300, 1 - 1e-16)
        ll = s_m * np.log(q) + (n_m - s_m) * np.log1p(-q) + prior_tf  # binomial up to a constant
        m = ll.max()
        log_marg[i] = lp[i] + m + np.log(np.exp(ll - m).sum())
    w = np.exp(log_marg - log_marg.max())
    w /= w.sum()
    cdf = np.cumsum(w)
    return float(np.dot(w, p)), float(np.interp(0.05, cdf, p)), float(np.interp(0.95, cdf, p))


NAMES = ["typical", "no_pos", "no_neg", "small"]


def simulated_cells(k=36, seed=5):
    """Cells with known rates, B = 100 and N = 10,000 (the validation setting of the issue, scaled down)."""
    rng = np.random.default_rng(seed)
    p, tpr, fpr = rng.uniform(0.1, 0.9, k), rng.uniform(0.6, 0.95, k), rng.uniform(0.05, 0.35, k)
    counts = simulate_counts(p, tpr, fpr, n_human=100, n_total=10_000, rng=rng)
    return p, np.array([[c.tp, c.fn, c.fp, c.tn, c.s_m, c.n_m] for c in counts])


@pytest.fixture(scope="module")
def batch_fit():
    """One batched fit serves every test: the four special cells, then the simulated ones."""
    _, sim = simulated_cells()
    rows = np.vstack([CELLS, sim])
    names = NAMES + [f"sim{k}" for k in range(len(sim))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        return fit_bcc_batch(*rows.T, cells=names, sampler=FAST, allow_no_human_positives=True, method="nuts")


@pytest.fixture(scope="module")
def oracle():
    return [grid_posterior(*row) for row in CELLS]


def test_grid_oracle_recovers_conjugate_case():
    # s_m = 0 of n_m = 1 with tpr and fpr both certain-ish is not conjugate, so check the limit with no
    # unlabelled information instead: a classifier with tpr = fpr carries none, leaving the human posterior.
    mean, lo, hi = grid_posterior(0, 0, 0, 0, 0, 0)  # n_m = 0: binomial pmf is 1 everywhere
    assert mean == pytest.approx(0.5, abs=1e-3)
    mean, lo, hi = grid_posterior(30, 0, 20, 0, 0, 0)
    assert mean == pytest.approx(31 / 52, abs=2e-3)
    assert (lo, hi) == pytest.approx(tuple(stats.beta.ppf([0.05, 0.95], 31, 21)), abs=3e-3)


def test_batch_matches_direct_integration(batch_fit, oracle):
    assert batch_fit.draws.shape == (4 + 36, FAST.chains * FAST.draws)
    assert batch_fit.cells[:4] == NAMES
    for k, (mean, lo, hi) in enumerate(oracle):
        draws = batch_fit.draws[k]
        assert draws.mean() == pytest.approx(mean, abs=0.01), k
        assert np.quantile(draws, [0.05, 0.95]) == pytest.approx([lo, hi], abs=0.02), k
    assert np.all(batch_fit.ess > 50)
    assert np.all(np.isfinite(batch_fit.rhat))


def test_single_cell_fit_matches_batch_and_oracle(batch_fit, oracle):
    fit = fit_bcc(*CELLS[0], sampler=SamplerConfig(draws=500, tune=500, chains=2, seed=11), method="nuts")
    assert fit.draws.shape == (1, 1000)
    assert fit.draws[0].mean() == pytest.approx(batch_fit.draws[0].mean(), abs=0.01)
    assert fit.draws[0].mean() == pytest.approx(oracle[0][0], abs=0.01)
    assert fit.idata.posterior["p"].dims == ("chain", "draw", "cell")


def test_batch_corrects_classify_and_count(batch_fit, oracle):
    # typical cell: classifier rate 0.4545, tpr ~0.8, fpr ~0.1 -> p ~ (0.4545 - 0.1) / 0.7 ~ 0.51
    assert batch_fit.draws[0].mean() == pytest.approx(0.51, abs=0.03)
    # no human positive and a classifier rate equal to its FPR: p stays near its human posterior Beta(1, 101)
    assert batch_fit.draws[1].mean() < 0.03


def test_idata_has_diagnostic_inputs(batch_fit):
    idata = batch_fit.idata
    assert set(idata.posterior.data_vars) >= {"p", "tpr", "fpr"}
    assert list(idata.posterior.coords["cell"].values) == batch_fit.cells
    assert idata.posterior["p"].sizes["cell"] == len(batch_fit.cells)
    assert "diverging" in idata.sample_stats


def test_simulated_intervals_cover_and_cc_is_biased(batch_fit):
    p_true, sim = simulated_cells()
    draws = batch_fit.draws[4:]
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=1)
    covered = np.sum((lo <= p_true) & (p_true <= hi))
    assert covered >= 27, f"90% intervals cover the true rate in only {covered} of {len(p_true)} cells"
    cc = (sim[:, 0] + sim[:, 2] + sim[:, 4] + 1) / (sim[:, :4].sum(1) + sim[:, 5] + 2)
    err_bcc = np.abs(draws.mean(axis=1) - p_true).mean()
    err_cc = np.abs(cc - p_true).mean()
    assert err_cc > 2 * err_bcc, (err_cc, err_bcc)


def test_tp_fn_zero_raises_unless_allowed():
    with pytest.raises(NoHumanPositivesError, match=r"\['no_pos'\].*tp \+ fn = 0.*allow_no_human_positives"):
        fit_bcc_batch(*CELLS[[0, 1]].T, cells=["ok", "no_pos"], sampler=FAST)
    with pytest.raises(QuantifyInputError, match="no human positive"):
        bcc_posterior(0, 0, 20, 80, 300, 9900, draws=10)
    with pytest.raises(ValueError, match=r"cell\(s\) \['0'\]"):
        validate_counts(0, 0, 20, 80, 300, 9900)
    with pytest.warns(BCCWarning, match="no human positive"):
        counts = validate_counts(0, 0, 20, 80, 300, 9900, allow_no_human_positives=True)
    assert counts["tp"].tolist() == [0]
    with pytest.warns(BCCWarning, match="no human positive"):
        draws = bcc_posterior(0, 0, 20, 80, 300, 9900, draws=100, chains=1, allow_no_human_positives=True)
    assert draws.shape == (100,) and np.all((draws >= 0) & (draws <= 1))
    with pytest.warns(BCCWarning, match="no human negative"):
        validate_counts(30, 5, 0, 0, 7900, 9900)


@pytest.mark.parametrize("counts,match", [
    ((0, 0, 0, 0, 10, 100), "no human label"),
    ((5, 5, 5, 5, 0, 0), "n_m = 0"),
    ((-1, 5, 5, 5, 10, 100), "negative"),
    ((5, 5, 5, 5, 10, -100), "negative"),  # more human labels than items: n_m = N - B < 0
    ((5, 5, 5, 5, 101, 100), "s_m > n_m"),
    ((5.5, 5, 5, 5, 10, 100), "whole counts"),
    ((np.nan, 5, 5, 5, 10, 100), "finite"),
    (([1, 2], [1, 2, 3], 5, 5, 10, 100), "different lengths"),
])
def test_bad_input_raises_clear_errors(counts, match):
    with pytest.raises(QuantifyInputError, match=match):
        validate_counts(*counts)
    with pytest.raises(QuantifyInputError):
        bcc_posterior(*counts, draws=10) if np.ndim(counts[0]) == 0 else fit_bcc_batch(*counts)


def test_fit_bcc_refuses_arrays():
    with pytest.raises(QuantifyInputError, match="scalar"):
        fit_bcc([1, 2], 1, 1, 1, 1, 10)


def test_cell_names_must_be_distinct():
    with pytest.raises(QuantifyInputError, match="distinct"):
        fit_bcc_batch(*CELLS[[0, 3]].T, cells=["a", "a"])


def test_one_chain_has_no_rhat_but_keeps_ess():
    fit = fit_bcc(*CELLS[0], sampler=SamplerConfig(draws=100, tune=100, chains=1, seed=0), method="nuts")
    assert np.isnan(fit.rhat).all() and fit.ess[0] > 0
    assert fit.draws.shape == (1, 100)
