"""Pooled cell of stratified groups and failed outputs: against direct computations on the same draws."""

from __future__ import annotations

import numpy as np
import pytest

from countboard.quantify import SamplerConfig, fit_bcc_batch
from countboard.quantify.cells import CellCounts, cell_report, counts_from_labels
from countboard.quantify.pooling import pool_posterior, pooled_human, pooled_report, population_weights

GROUPS = [CellCounts(8, 2, 5, 85, 40, 50), CellCounts(70, 10, 4, 16, 6000, 9900, n_failed=100)]


def test_weights_are_the_judged_items():
    w = population_weights(GROUPS)
    assert w.tolist() == pytest.approx([150 / 10150, 10000 / 10150])


def test_pooled_human_matches_the_moments_of_the_weighted_sum():
    w = np.array([0.3, 0.7])
    rng = np.random.default_rng(0)
    sums = w[0] * rng.beta(11, 91, 400_000) + w[1] * rng.beta(81, 21, 400_000)
    a, b = pooled_human(GROUPS, w)
    assert a / (a + b) == pytest.approx(sums.mean(), abs=5e-4)
    assert a * b / ((a + b) ** 2 * (a + b + 1)) == pytest.approx(sums.var(), rel=0.02)


def test_pooled_report_combines_draws_and_classifier_rates():
    fit = fit_bcc_batch(*zip(*[(c.tp, c.fn, c.fp, c.tn, c.s_m, c.n_m) for c in GROUPS], strict=True),
                        cells=["a", "b"], sampler=SamplerConfig(draws=1000, chains=2, seed=1))
    row, draws, posterior = pooled_report(GROUPS, fit, "all")
    w = population_weights(GROUPS)
    share = 10150 / 10250
    assert draws == pytest.approx(share * (w @ fit.draws))
    assert row["acs_bcc_mean"] == pytest.approx(share * (w @ fit.mean))
    assert row["acs_failure_rate"] == pytest.approx(100 / 10250)
    assert row["acs_n_items"] == 10250 and row["bcc_tp"] == 78
    assert row["acs_cc_mean"] == pytest.approx((78 + 9 + 6040 + 1) / (10250 + 2))
    post = fit.idata.posterior
    p, t, f = (post[v].values[0] for v in ("p", "tpr", "fpr"))  # (draw, cell)
    expect_t = (p * t) @ w / (p @ w)
    expect_f = ((1 - p) * f) @ w / ((1 - p) @ w)
    assert posterior["tpr"].sel(cell="all").values[0] == pytest.approx(expect_t)
    assert posterior["fpr"].sel(cell="all").values[0] == pytest.approx(expect_f)
    assert list(posterior["cell"].values) == ["a", "b", "all"]


def test_pool_posterior_of_one_group_is_that_group():
    fit = fit_bcc_batch(40, 10, 5, 45, 4500, 9900, cells=["g"])
    pooled = pool_posterior(fit.idata.posterior, np.array([1.0]), "all")
    for v in ("p", "tpr", "fpr"):
        np.testing.assert_allclose(pooled[v].sel(cell="all").values, pooled[v].sel(cell="g").values)


def test_failed_outputs_scale_every_rate_and_stay_in_the_denominator():
    rng = np.random.default_rng(3)
    draws = rng.beta(60, 40, 4000)
    judged = cell_report(CellCounts(40, 10, 5, 45, 4500, 9900), draws)
    failed = cell_report(CellCounts(40, 10, 5, 45, 4500, 9900, n_failed=10_000), draws)
    assert failed["acs_failure_rate"] == pytest.approx(10_000 / 20_000)
    assert failed["acs_n_items"] == 20_000
    for key in ("acs_bcc_mean", "acs_bcc_low", "acs_bcc_high", "acs_human_mean"):
        assert failed[key] == pytest.approx(judged[key] / 2, rel=1e-9), key
    assert failed["acs_cc_mean"] == pytest.approx((4545 + 1) / (20_000 + 2))
    assert failed["var_bcc"] == pytest.approx(judged["var_bcc"] / 4)
    assert failed["sample_value"] == pytest.approx(judged["sample_value"])


def test_counts_from_labels_sets_failed_items_apart():
    c = counts_from_labels(np.array([1, 1, 0, 0, 1, 1]), np.array([1, 0, 0, np.nan, np.nan, 1]),
                           failed=np.array([False, False, False, False, True, True]))
    assert c == CellCounts(1, 0, 1, 1, 0, 1, n_failed=2)
    assert c.n_total == 6 and c.n_judged == 4 and c.judged_share == pytest.approx(4 / 6)
