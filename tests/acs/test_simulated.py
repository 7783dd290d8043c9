"""Simulated ACS items and classifiers (countboard.acs.datasets.simulated)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from countboard.acs.datasets.simulated import (
    ColumnClassifier,
    SimulatedACS,
    SimulatedClassifier,
    simulate_counts,
)
from countboard.errors import ConfigError


def test_simulated_items_are_deterministic_with_known_rates():
    ds = SimulatedACS(n_items=5000, p=[0.2, 0.7], group_names=["a", "b"], seed=3)
    items = ds.items()
    assert len(items) == len(ds) == 10_000
    assert items["item_id"].is_unique
    rates = items.groupby("group")["human"].mean()
    assert rates["a"] == pytest.approx(0.2, abs=0.02) and rates["b"] == pytest.approx(0.7, abs=0.02)
    again = SimulatedACS(n_items=5000, p=[0.2, 0.7], group_names=["a", "b"], seed=3).items()
    pd.testing.assert_frame_equal(items, again)


def test_simulated_classifier_has_its_rates_and_is_stable_across_batches():
    items = SimulatedACS(n_items=20_000, p=0.5, seed=1).items()
    clf = SimulatedClassifier(tpr=0.85, fpr=0.1, seed=2)
    d = clf.decide(items)
    truth = items["human"].to_numpy()
    assert d[truth == 1].mean() == pytest.approx(0.85, abs=0.015)
    assert d[truth == 0].mean() == pytest.approx(0.1, abs=0.015)
    shuffled = items.sample(frac=1.0, random_state=0)
    np.testing.assert_array_equal(clf.decide(shuffled), d[shuffled.index.to_numpy()])
    np.testing.assert_array_equal(clf.decide(items.iloc[100:200]), d[100:200])


def test_classifier_errors():
    with pytest.raises(ConfigError):
        SimulatedClassifier(tpr=1.2)
    items = pd.DataFrame({"item_id": ["a", "b"], "group": ["g", "g"], "human": [1.0, np.nan]})
    with pytest.raises(ConfigError, match="true label"):
        SimulatedClassifier().decide(items)
    with pytest.raises(ConfigError, match="not a column"):
        ColumnClassifier("annotator_9").decide(items)


def test_column_classifier_reads_decisions():
    items = pd.DataFrame({"item_id": list("abc"), "group": "g", "human": np.nan, "ann": [1, 0, 1]})
    np.testing.assert_array_equal(ColumnClassifier("ann").decide(items), [1, 0, 1])
    np.testing.assert_array_equal(ColumnClassifier("ann", positive=0).decide(items), [0, 1, 0])


@pytest.mark.parametrize("kwargs", [dict(p=1.5), dict(p=[0.2, 0.3], group_names=["x"]), dict(n_items=0)])
def test_simulated_dataset_rejects_bad_config(kwargs):
    with pytest.raises(ConfigError):
        SimulatedACS(**kwargs)


def test_simulate_counts_follow_the_rates():
    rng = np.random.default_rng(0)
    k = 400
    cells = simulate_counts(np.full(k, 0.6), np.full(k, 0.9), np.full(k, 0.2), 100, 10_000, rng)
    assert all(c.n_human == 100 and c.n_total == 10_000 for c in cells)
    s_h = np.array([c.s_human for c in cells])
    assert s_h.mean() == pytest.approx(60, abs=1.0)
    rate_m = np.array([c.s_m / c.n_m for c in cells])
    assert rate_m.mean() == pytest.approx(0.9 * 0.6 + 0.2 * 0.4, abs=0.002)
    with pytest.raises(ConfigError):
        simulate_counts(np.array([0.5]), np.array([0.9]), np.array([0.1]), 100, 100, rng)
