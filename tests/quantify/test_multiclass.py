"""Multi-class BCC: two labels reduce to the binary model; three labels recover known prevalences; NUTS reuses its
compiled model (the exact method's own tests: test_exact_multiclass.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from countboard.quantify import BCCWarning, QuantifyInputError, SamplerConfig, fit_bcc_multiclass
from tests.quantify.test_bcc import grid_posterior


def test_two_labels_match_the_binary_model():
    tp, fn, fp, tn, s_m, n_m = 40, 10, 5, 45, 4500, 9900
    fit = fit_bcc_multiclass([[tn, fp], [fn, tp]], [n_m - s_m, s_m], labels=["fail", "success"],
                             sampler=SamplerConfig(draws=400, tune=400, seed=2))
    assert fit.labels == ["fail", "success"]
    assert fit.draws.shape == (800, 2)
    np.testing.assert_allclose(fit.draws.sum(axis=1), 1.0, atol=1e-9)
    mean, lo, hi = grid_posterior(tp, fn, fp, tn, s_m, n_m)
    assert fit.draws[:, 1].mean() == pytest.approx(mean, abs=0.01)
    assert np.quantile(fit.draws[:, 1], [0.05, 0.95]) == pytest.approx([lo, hi], abs=0.02)
    assert fit.ess.min() > 50


def test_three_labels_recover_known_prevalences():
    rng = np.random.default_rng(0)
    pi = np.array([0.5, 0.3, 0.2])
    theta = np.array([[0.8, 0.15, 0.05], [0.1, 0.7, 0.2], [0.05, 0.25, 0.7]])
    human = rng.choice(3, size=300, p=pi)
    conf = np.zeros((3, 3), dtype=int)
    for h in human:
        conf[h, rng.choice(3, p=theta[h])] += 1
    unl = rng.choice(3, size=9700, p=pi)
    s = np.bincount([rng.choice(3, p=theta[h]) for h in unl], minlength=3)
    fit = fit_bcc_multiclass(conf, s, sampler=SamplerConfig(draws=300, tune=300, seed=1))
    assert fit.draws.mean(axis=0) == pytest.approx(pi, abs=0.05)
    naive = s / s.sum()
    assert np.abs(fit.draws.mean(axis=0) - pi).sum() < np.abs(naive - pi).sum()


@pytest.mark.parametrize("conf,s,match", [
    ([[1, 2, 3]], [1, 2, 3], "square"),
    ([[1, 2], [3, 4]], [1, 2, 3], "one count per label"),
    ([[1, -2], [3, 4]], [1, 2], "non-negative"),
    ([[0, 0], [0, 0]], [1, 2], "B = 0"),
    ([[1, 2], [3, 4]], [0, 0], "n_m = 0"),
])
def test_bad_inputs(conf, s, match):
    with pytest.raises(QuantifyInputError, match=match):
        fit_bcc_multiclass(conf, s)


def test_empty_human_row_warns():
    from countboard.quantify.multiclass import _validate

    with pytest.warns(BCCWarning, match="uniform Dirichlet"):
        _validate([[5, 1, 0], [0, 0, 0], [1, 2, 6]], [30, 30, 40], ["a", "b", "c"])


def test_fits_with_the_same_labels_reuse_one_compiled_model():
    from countboard.quantify import multiclass

    multiclass.MC_CACHE.clear()
    cfg = SamplerConfig(draws=100, tune=100, chains=1, seed=2)
    conf, s = [[30, 5, 5], [4, 20, 6], [2, 3, 25]], [3000, 3000, 3900]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        first = fit_bcc_multiclass(conf, s, labels=["a", "b", "c"], sampler=cfg, method="nuts")
        cached = multiclass.MC_CACHE[(3, cfg.target_accept)]
        other = fit_bcc_multiclass([[10, 1, 1], [1, 10, 1], [1, 1, 10]], [100, 8000, 100], sampler=cfg,
                                   method="nuts")
        again = fit_bcc_multiclass(conf, s, labels=["x", "y", "z"], sampler=cfg, method="nuts")
    assert list(multiclass.MC_CACHE) == [(3, cfg.target_accept)] and multiclass.MC_CACHE[(3, cfg.target_accept)] is cached
    assert other.draws[:, 1].mean() > 0.8 > first.draws[:, 1].mean()
    np.testing.assert_array_equal(first.draws, again.draws)
    assert list(again.idata.posterior.coords["label"].values) == ["x", "y", "z"]
    assert first.method == "nuts" and first.mcse.shape == (3,)
