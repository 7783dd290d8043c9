"""Per-cell report: counts from labels against a loop, metrics against their definitions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from countboard.quantify import (
    CellCounts,
    QuantifyInputError,
    beta_from_moments,
    cell_report,
    counts_from_labels,
    js_divergence_beta,
)
from countboard.schema import load_schema


def counts_loop(decision, human):
    out = dict(tp=0, fn=0, fp=0, tn=0, s_m=0, n_m=0)
    for d, h in zip(decision, human, strict=True):
        if np.isnan(h):
            out["n_m"] += 1
            out["s_m"] += int(d == 1)
        elif h == 1:
            out["tp" if d == 1 else "fn"] += 1
        else:
            out["fp" if d == 1 else "tn"] += 1
    return CellCounts(**out)


def test_counts_from_labels_hand_case():
    c = counts_from_labels(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, np.nan, np.nan]))
    assert c == CellCounts(tp=1, fn=0, fp=1, tn=1, s_m=1, n_m=2)
    assert (c.n_human, c.s_human, c.n_total, c.s_cc) == (3, 1, 5, 3)


def test_counts_from_labels_matches_loop_on_seeded_inputs():
    rng = np.random.default_rng(1)
    for _ in range(5):
        n = int(rng.integers(5, 400))
        decision = rng.integers(0, 2, n)
        human = rng.integers(0, 2, n).astype(float)
        human[rng.random(n) < 0.7] = np.nan
        assert counts_from_labels(decision, human) == counts_loop(decision, human)


@pytest.mark.parametrize("decision,human", [
    ([1, 2], [1, 0]), ([1, 0], [1, 0.5]), ([1, 0, 1], [1, 0]), ([[1]], [[1]]),
])
def test_counts_from_labels_rejects_bad_labels(decision, human):
    with pytest.raises(QuantifyInputError):
        counts_from_labels(np.array(decision), np.array(human, dtype=float))


def test_cell_report_matches_definitions():
    counts = CellCounts(tp=40, fn=10, fp=5, tn=45, s_m=4500, n_m=9900)
    draws = np.random.default_rng(0).beta(260.0, 250.0, size=4000)
    r = cell_report(counts, draws, rhat=1.002, ess=900.0)
    # human posterior Beta(51, 51); CC posterior Beta(4546, 5456) over all 10,000 items
    assert r["acs_human_mean"] == pytest.approx(0.5)
    assert (r["human_alpha"], r["human_beta"]) == (51.0, 51.0)
    assert (r["cc_alpha"], r["cc_beta"]) == (4546.0, 5456.0)
    assert r["acs_cc_mean"] == pytest.approx(4546 / 10_002)
    assert r["var_cc"] == pytest.approx(stats.beta.var(4546, 5456))
    assert r["var_human"] == pytest.approx(stats.beta.var(51, 51))
    a, b = beta_from_moments(draws)
    assert (r["bcc_alpha"], r["bcc_beta"]) == pytest.approx((a, b))
    assert r["acs_bcc_mean"] == pytest.approx(draws.mean())
    assert [r["acs_bcc_low"], r["acs_bcc_high"]] == pytest.approx(np.quantile(draws, [0.05, 0.95]).tolist())
    assert r["var_bcc"] == pytest.approx(draws.var(ddof=1))
    assert r["js_bcc_human"] == pytest.approx(js_divergence_beta(a, b, 51, 51))
    assert r["js_cc_human"] == pytest.approx(js_divergence_beta(4546, 5456, 51, 51))
    assert r["eas"] == pytest.approx(a + b - 100)
    assert r["sample_value"] == pytest.approx((a + b - 100) / 9900)
    assert (r["bcc_tp"], r["bcc_fn"], r["bcc_fp"], r["bcc_tn"]) == (40, 10, 5, 45)
    assert (r["acs_n_human"], r["acs_n_items"], r["bcc_rhat"], r["bcc_ess"]) == (100, 10_000, 1.002, 900.0)
    assert r["js_cc_human"] > r["js_bcc_human"]


def test_every_report_key_is_declared_in_the_schema():
    r = cell_report(CellCounts(10, 5, 3, 12, 300, 970), np.random.default_rng(2).beta(30, 30, 500))
    schema = load_schema()
    for key in r:
        assert schema.metric(key).family == "acs"
    assert schema.families["acs"].main_metric == "acs_bcc_mean"


@pytest.mark.parametrize("module", [
    "countboard.quantify.beta", "countboard.quantify.baselines", "countboard.quantify.cells",
    "countboard.quantify.compare", "countboard.acs.datasets.simulated",
])
def test_docstring_examples_hold(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0
