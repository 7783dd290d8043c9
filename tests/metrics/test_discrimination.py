"""Mann-Whitney U and AUROC against scipy.stats and a direct pair count."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from countboard.metrics.discrimination import auroc, auroc_interval, auroc_units, mann_whitney


@pytest.mark.parametrize("seed", range(6))
def test_mann_whitney_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 80))
    y = rng.random(n) < 0.4
    y[:2] = [True, False]
    s = np.round(rng.normal(y * 0.5, 1.0), 1 if seed % 2 else 6)  # ties on odd seeds
    u, p = mann_whitney(s, y)
    ref = stats.mannwhitneyu(s[y], s[~y], alternative="two-sided", method="asymptotic", use_continuity=True)
    assert u == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue, rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_auroc_is_the_share_of_ordered_pairs(seed):
    rng = np.random.default_rng(seed)
    y = rng.random(60) < 0.5
    s = np.round(rng.normal(y * 0.8, 1.0), 1)
    pos, neg = s[y], s[~y]
    direct = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
    assert auroc(s, y) == pytest.approx(direct)
    assert auroc_units(s, y).value() == pytest.approx(direct)
    # scipy: the AUROC is the Mann-Whitney U of the correct group over n1 * n0
    ref = stats.mannwhitneyu(s[y], s[~y], method="asymptotic").statistic / (y.sum() * (~y).sum())
    assert auroc(s, y) == pytest.approx(ref)


def test_resampled_auroc_matches_the_direct_value_per_row_and_interval_holds_it():
    rng = np.random.default_rng(1)
    y = rng.random(80) < 0.5
    s = rng.normal(y * 1.0, 1.0)
    unit = auroc_units(s, y)
    idx = rng.integers(0, 80, size=(5, 80))
    got = unit.of_resamples(idx)
    assert got == pytest.approx([auroc(s[i], y[i]) for i in idx])
    lo, hi = auroc_interval(s, y)
    assert lo < auroc(s, y) < hi


def test_one_group_only_gives_nan():
    assert np.isnan(auroc([1.0, 2.0], [1, 1])) and np.isnan(mann_whitney([1.0, 2.0], [0, 0])[1])
