"""Numeracy metrics against hand-computed cases and direct loop implementations."""

from __future__ import annotations

import math
import statistics
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from countboard.metrics.numeracy import (
    accuracy_se,
    bootstrap_ci,
    chi2_accuracy_test,
    mode_labels,
    number_columns,
    number_confusion,
    permutation_chi2_test,
    round_answers,
)


def _loop_mode(answers: list[float], target: float, ties: str) -> tuple[float, int, bool]:
    counts = Counter(answers)
    best = max(counts.values())
    modes = sorted(v for v, c in counts.items() if c == best)
    if ties == "any" and target in modes:
        return target, len(modes), True
    label = statistics.mode(answers) if ties == "first" else modes[0]
    correct = label == target and (ties != "none" or len(modes) == 1)
    return label, len(modes), correct


def test_mode_labels_hand_cases():
    df = pd.DataFrame(
        {
            "unit": ["a"] * 5 + ["b"] * 4 + ["c"] * 3,
            "value": [2, 2, 2, 3, 1, 3, 3, 4, 4, 5, 6, np.nan],
            "target": [2] * 5 + [4] * 4 + [6] * 3,
        }
    )
    low = mode_labels(df, ["unit"], "value", "target", ties="lowest").set_index("unit")
    assert low.loc["a", ["label", "n_modes", "n_answers", "correct"]].tolist() == [2.0, 1, 5, True]
    assert low.loc["b", ["label", "n_modes", "correct"]].tolist() == [3.0, 2, False]
    assert low.loc["c", ["label", "n_modes", "n_answers", "correct"]].tolist() == [5.0, 2, 2, False]
    anyr = mode_labels(df, ["unit"], "value", "target", ties="any").set_index("unit")
    assert anyr["correct"].tolist() == [True, True, True]
    assert anyr.loc["b", "label"] == 4.0
    none = mode_labels(df, ["unit"], "value", "target", ties="none").set_index("unit")
    assert none["correct"].tolist() == [True, False, False]
    # "first": the tied answer given first wins (b: 3 before 4; c: 5 before 6), in row order or by ``order``.
    first = mode_labels(df, ["unit"], "value", "target").set_index("unit")
    assert first["label"].tolist() == [2.0, 3.0, 5.0] and first["correct"].tolist() == [True, False, False]
    df["when"] = [0, 1, 2, 3, 4, 9, 8, 1, 2, 7, 6, 0]
    by_time = mode_labels(df, ["unit"], "value", "target", order="when").set_index("unit")
    assert by_time["label"].tolist() == [2.0, 4.0, 6.0] and by_time["correct"].tolist() == [True, True, True]
    with pytest.raises(ValueError, match="ties must be one of"):
        mode_labels(df, ["unit"], "value", "target", ties="random")


def test_round_answers_rounds_ranges_up():
    # Appendix B.2: counts 2, 2, 0, 1.5, 1.5 and 1.5, 1.5, 1, 2, 1 both give the label 2 once rounded up.
    for answers in ([2, 2, 0, 1.5, 1.5], [1.5, 1.5, 1, 2, 1]):
        df = pd.DataFrame({"u": 0, "v": round_answers(answers), "t": 2})
        assert mode_labels(df, ["u"], "v", "t")["label"].item() == 2.0
    assert round_answers([2.5, 3.0, 2.25, 0.5]).tolist() == [3.0, 3.0, 3.0, 1.0]
    assert round_answers([2.5], "midpoint").tolist() == [2.5]
    with pytest.raises(ValueError, match="ranges must be one of"):
        round_answers([1.0], "down")


@pytest.mark.parametrize("ties", ["first", "lowest", "any", "none"])
def test_mode_labels_matches_loop(ties):
    rng = np.random.default_rng(3)
    n_units = 300
    sizes = rng.integers(1, 7, size=n_units)
    unit = np.repeat(np.arange(n_units), sizes)
    value = rng.integers(0, 4, size=unit.size).astype(float)
    target = np.repeat(rng.integers(0, 4, size=n_units), sizes).astype(float)
    df = pd.DataFrame({"unit": unit, "value": value, "target": target})
    got = mode_labels(df, ["unit"], "value", "target", ties=ties).set_index("unit")
    for u in range(n_units):
        answers = value[unit == u].tolist()
        label, n_modes, correct = _loop_mode(answers, float(target[unit == u][0]), ties)
        assert got.loc[u, "label"] == label
        assert got.loc[u, "n_modes"] == n_modes
        assert bool(got.loc[u, "correct"]) == correct


def test_accuracy_se_formula():
    assert accuracy_se([1, 0, 1, 1]) == (0.75, 0.25)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=500).astype(float)
    mean, se = accuracy_se(x)
    p = x.mean()
    assert se == pytest.approx(math.sqrt(p * (1 - p) / (x.size - 1)), rel=1e-12)
    assert se == pytest.approx(stats.sem(x), rel=1e-12)
    y = rng.random(200)
    assert accuracy_se(y)[1] == pytest.approx(stats.sem(y), rel=1e-12)
    assert math.isnan(accuracy_se([1.0])[1])
    assert all(math.isnan(v) for v in accuracy_se([]))


def test_bootstrap_ci_binary_shortcut_agrees_with_resampling():
    rng = np.random.default_rng(1)
    x = (rng.random(400) < 0.3).astype(float)
    lo, hi = bootstrap_ci(x, n_boot=4000, seed=2)
    # Direct resampling with a loop.
    means = [x[rng.integers(0, x.size, x.size)].mean() for _ in range(4000)]
    lo_ref, hi_ref = np.quantile(means, [0.025, 0.975])
    assert lo == pytest.approx(lo_ref, abs=0.01)
    assert hi == pytest.approx(hi_ref, abs=0.01)
    assert lo < x.mean() < hi
    # Normal approximation of the interval width.
    assert hi - lo == pytest.approx(2 * 1.96 * stats.sem(x), rel=0.1)


def test_bootstrap_ci_continuous_values():
    rng = np.random.default_rng(4)
    x = rng.random(300)
    lo, hi = bootstrap_ci(x, n_boot=2000, seed=0)
    assert hi - lo == pytest.approx(2 * 1.96 * stats.sem(x), rel=0.1)
    assert bootstrap_ci(x, n_boot=500, seed=7) == bootstrap_ci(x, n_boot=500, seed=7)
    assert all(math.isnan(v) for v in bootstrap_ci([]))


def test_chi2_matches_pearson_formula():
    a = np.array([1] * 60 + [0] * 40)
    b = np.array([1] * 40 + [0] * 60)
    res = chi2_accuracy_test(a, b)
    observed = np.array([[60, 40], [40, 60]], dtype=float)
    expected = observed.sum(1, keepdims=True) * observed.sum(0, keepdims=True) / observed.sum()
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert res["chi2"] == pytest.approx(chi2)
    assert res["p_value"] == pytest.approx(stats.chi2.sf(chi2, df=1))
    assert (res["acc_a"], res["acc_b"], res["n"]) == (0.6, 0.4, 200.0)
    yates = chi2_accuracy_test(a, b, correction=True)
    assert yates["chi2"] < res["chi2"]
    same = chi2_accuracy_test(np.ones(10), np.ones(5))
    assert (same["chi2"], same["p_value"]) == (0.0, 1.0)


@pytest.mark.parametrize("correction", [False, True])
def test_chi2_matches_scipy_on_random_tables(correction):
    rng = np.random.default_rng(6)
    for _ in range(50):
        a = rng.random(rng.integers(5, 300)) < rng.random()
        b = rng.random(rng.integers(5, 300)) < rng.random()
        table = np.array([[a.sum(), (~a).sum()], [b.sum(), (~b).sum()]])
        if (table.sum(0) == 0).any():
            continue
        ref = stats.chi2_contingency(table, correction=correction)
        got = chi2_accuracy_test(a, b, correction=correction)
        assert got["chi2"] == pytest.approx(ref.statistic, rel=1e-9, abs=1e-12)
        assert got["p_value"] == pytest.approx(ref.pvalue, rel=1e-7, abs=1e-15)


def test_number_confusion_hand_and_loop():
    m = number_confusion([1, 1, 2, 2, 3], [1, 2.5, 2, 14, 0])
    assert m.columns.tolist() == [*number_columns(10), "n"]
    assert "range" not in m.columns and number_columns(2) == ["0", "1", "2", "2+"]
    assert m.loc[1, "1"] == 0.5 and m.loc[1, "3"] == 0.5  # the range 2.5 is rounded up into bin 3
    assert m.loc[2, "2"] == 0.5 and m.loc[2, "10+"] == 0.5
    assert m.loc[3, "0"] == 1.0
    assert m.loc[4].drop("n").sum() == 0 and m.loc[4, "n"] == 0
    rng = np.random.default_rng(5)
    t = rng.integers(1, 11, size=1000)
    y = rng.integers(0, 14, size=1000).astype(float)
    y[::7] += 0.5
    m = number_confusion(t, y)
    for row in range(1, 11):
        sel = y[t == row]
        expect = {c: 0 for c in number_columns(10)}
        for v in sel:
            v = math.ceil(v)
            expect["10+" if v > 10 else str(v)] += 1
        for c, k in expect.items():
            assert m.loc[row, c] == pytest.approx(k / sel.size)
        assert m.loc[row].drop("n").sum() == pytest.approx(1.0)


def test_permutation_control_against_direct_shuffles():
    rng = np.random.default_rng(8)
    a = rng.random(300) < 0.6
    b = rng.random(200) < 0.45
    res = permutation_chi2_test(a, b, n_perm=2000, seed=1)
    assert res["chi2"] == pytest.approx(chi2_accuracy_test(a, b)["chi2"])
    # Direct implementation: shuffle the pooled outcomes, split at the original sizes.
    pooled = np.concatenate([a, b])
    shuffled = []
    for _ in range(2000):
        rng.shuffle(pooled)
        shuffled.append(chi2_accuracy_test(pooled[: a.size], pooled[a.size :])["chi2"])
    direct_p = (np.sum(np.array(shuffled) >= res["chi2"]) + 1) / 2001
    assert res["perm_p_value"] == pytest.approx(direct_p, abs=0.01)
    assert res["perm_p_value"] == pytest.approx(chi2_accuracy_test(a, b)["p_value"], abs=0.01)
    # Under permuted labels the difference is not significant in most splits.
    controls = [permutation_chi2_test(a, b, n_perm=1, seed=s)["control_p_value"] for s in range(200)]
    assert 0.9 <= np.mean(np.array(controls) > 0.05) <= 0.99
    same = permutation_chi2_test(np.ones(5, bool), np.ones(5, bool), n_perm=10)
    assert same["chi2"] == 0.0 and same["perm_p_value"] == 1.0


@pytest.mark.parametrize(
    "module",
    [
        "countboard.metrics.numeracy",
        "countboard.numeracy.release",
        "countboard.numeracy.answers",
        "countboard.numeracy.scoring",
        "countboard.numeracy.summary",
        "countboard.numeracy.comparisons",
        "countboard.numeracy.datasets.templates",
        "countboard.numeracy.datasets.prompts",
        "countboard.models.base",
        "countboard.numeracy.models.procedural",
        "countboard.numeracy.tasks.geckonum",
        "countboard.numeracy.tasks.geckonum_bcc",
    ],
)
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0
