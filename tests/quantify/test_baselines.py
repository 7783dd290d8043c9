"""ACC and PPI baselines: hand cases, an item-level direct implementation, and simulated coverage."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from countboard.acs.datasets.simulated import simulate_counts
from countboard.quantify import QuantifyInputError, acc_estimate, ppi_interval


def ppi_direct(tp, fn, fp, tn, s_m, n_m, mass=0.9):
    """PPI for a mean from item-level arrays (Angelopoulos et al. 2023, eq. for the mean)."""
    f_lab = np.array([1] * tp + [0] * fn + [1] * fp + [0] * tn, dtype=float)
    y_lab = np.array([1] * tp + [1] * fn + [0] * fp + [0] * tn, dtype=float)
    f_unl = np.array([1] * s_m + [0] * (n_m - s_m), dtype=float)
    rect = f_lab - y_lab
    est = f_unl.mean() - rect.mean()
    se = np.sqrt(f_unl.var(ddof=0) / n_m + rect.var(ddof=1) / len(rect))
    z = stats.norm.ppf(0.5 + mass / 2)
    return est, float(np.clip(est - z * se, 0, 1)), float(np.clip(est + z * se, 0, 1))


def test_acc_hand_case():
    assert acc_estimate(40, 10, 5, 45, 4500, 10_000) == pytest.approx(0.5)
    assert acc_estimate(40, 10, 5, 45, 0, 10_000) == 0.0  # clipped at 0
    assert acc_estimate(40, 10, 5, 45, 10_000, 10_000) == 1.0  # clipped at 1


@pytest.mark.parametrize("counts,match", [
    ((0, 0, 5, 45, 100, 1000), "tp \\+ fn = 0"),
    ((5, 5, 0, 0, 100, 1000), "fp \\+ tn = 0"),
    ((5, 5, 5, 5, 100, 1000), "TPR equals the FPR"),
    ((5, 5, 5, 5, 0, 0), "n_m = 0"),
    ((5, -5, 5, 5, 10, 100), "negative"),
    ((5, 5, 5, 5, 101, 100), "s_m > n_m"),
])
def test_acc_errors(counts, match):
    with pytest.raises(QuantifyInputError, match=match):
        acc_estimate(*counts)


def test_ppi_matches_item_level_implementation():
    rng = np.random.default_rng(4)
    for _ in range(6):
        tp, fn, fp, tn = (int(x) for x in rng.integers(0, 40, 4))
        n_m = int(rng.integers(50, 3000))
        s_m = int(rng.integers(0, n_m + 1))
        assert ppi_interval(tp, fn, fp, tn, s_m, n_m) == pytest.approx(ppi_direct(tp, fn, fp, tn, s_m, n_m))


def test_ppi_hand_case_and_errors():
    est, lo, hi = ppi_interval(40, 10, 5, 45, 4500, 10_000)
    assert est == pytest.approx(0.45 + 0.05)
    assert lo < est < hi
    with pytest.raises(QuantifyInputError, match="at least two"):
        ppi_interval(1, 0, 0, 0, 10, 100)
    with pytest.raises(QuantifyInputError, match="no human label"):
        ppi_interval(0, 0, 0, 0, 10, 100)


def test_acc_and_ppi_on_simulated_cells():
    rng = np.random.default_rng(9)
    k = 2000
    p, tpr, fpr = rng.uniform(0.1, 0.9, k), rng.uniform(0.6, 0.95, k), rng.uniform(0.05, 0.35, k)
    cells = simulate_counts(p, tpr, fpr, n_human=100, n_total=10_000, rng=rng)
    intervals = np.array([ppi_interval(c.tp, c.fn, c.fp, c.tn, c.s_m, c.n_m) for c in cells])
    coverage = np.mean((intervals[:, 1] <= p) & (p <= intervals[:, 2]))
    assert 0.86 <= coverage <= 0.94
    acc = np.array([acc_estimate(c.tp, c.fn, c.fp, c.tn, c.s_m, c.n_m) for c in cells])
    cc = np.array([c.s_cc / c.n_total for c in cells])
    assert np.abs(acc - p).mean() < 0.75 * np.abs(cc - p).mean()
