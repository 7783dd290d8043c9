"""Replicate draws of the labelled subset: counts against a direct loop, coverage on simulated judges."""

from __future__ import annotations

import numpy as np
import pytest

from countboard.errors import CountboardError
from countboard.quantify.validation import replicate_calibration, replicate_counts


def _judge(n: int, rate: float, tpr: float, fpr: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    human = (rng.random(n) < rate).astype(int)
    decision = np.where(human == 1, rng.random(n) < tpr, rng.random(n) < fpr).astype(int)
    return decision, human


def test_replicate_counts_match_a_direct_count_of_each_subset():
    d, h = _judge(300, 0.4, 0.8, 0.2)
    c = replicate_counts(d, h, 40, 25, np.random.default_rng(3))
    keys = np.random.default_rng(3).random((25, 300))
    for r in range(25):
        chosen = np.argsort(keys[r])[:40]
        rest = np.setdiff1d(np.arange(300), chosen)
        dd, hh = d[chosen], h[chosen]
        assert c["tp"][r] == ((dd == 1) & (hh == 1)).sum() and c["fn"][r] == ((dd == 0) & (hh == 1)).sum()
        assert c["fp"][r] == ((dd == 1) & (hh == 0)).sum() and c["tn"][r] == ((dd == 0) & (hh == 0)).sum()
        assert c["s_m"][r] == d[rest].sum() and c["n_m"][r] == 260


@pytest.mark.parametrize(("tpr", "fpr"), [(0.7, 0.05), (0.95, 0.3)])
def test_bcc_covers_at_its_level_where_cc_is_biased(tpr, fpr):
    d, h = _judge(4000, 0.35, tpr, fpr, seed=1)
    table = replicate_calibration(d, h, [100], replicates=200, levels=[0.9], draws=1000).set_index("method")
    truth = h.mean()
    assert table.loc["bcc", "truth"] == pytest.approx(truth)
    # a biased judge: CC's rate is off by about tpr*p + fpr*(1-p) - p and its narrow interval misses the truth
    assert abs(d.mean() - truth) > 0.05 and table.loc["cc", "coverage"] == 0.0
    assert table.loc["cc", "mae"] == pytest.approx(abs((d.sum() + 1) / (d.size + 2) - truth))
    # BCC and the human-only posterior are calibrated: coverage near 0.9 (binomial sd of 200 replicates ~0.02)
    assert table.loc["bcc", "coverage"] == pytest.approx(0.9, abs=0.06)
    assert table.loc["human", "coverage"] == pytest.approx(0.9, abs=0.06)
    # the judge's decisions on the other units make BCC more precise than the labels alone
    assert table.loc["bcc", "mae"] < table.loc["human", "mae"]
    assert table.loc["bcc", "width"] < table.loc["human", "width"]


def test_error_falls_with_more_labels_and_sizes_beyond_the_units_are_left_out():
    d, h = _judge(1500, 0.5, 0.8, 0.1, seed=2)
    table = replicate_calibration(d, h, [25, 200, 1500, 5000], replicates=60, levels=[0.5, 0.95], draws=500)
    assert sorted(table["n_human"].unique()) == [25, 200]
    bcc = table[table["method"] == "bcc"].groupby("n_human")["mae"].first()
    assert bcc[200] < bcc[25]
    wide = table[(table["method"] == "bcc") & (table["n_human"] == 25)].set_index("level")["width"]
    assert wide[0.95] > wide[0.5]


def test_every_unit_needs_a_label():
    with pytest.raises(CountboardError, match="human label for every unit"):
        replicate_calibration(np.array([1, 0]), np.array([1.0, np.nan]))
