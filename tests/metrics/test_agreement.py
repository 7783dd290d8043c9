"""Agreement metrics against hand-computed cases, direct loops and scikit-learn."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from sklearn import metrics as skm

from countboard.metrics import agreement
from countboard.metrics.agreement import (
    binary_rates,
    cohen_kappa,
    confusion_matrix,
    macro_f1,
    one_vs_rest_rates,
)

LABELS = ["positive", "neutral", "negative"]


def test_docstring_examples():
    assert doctest.testmod(agreement).failed == 0


def test_hand_computed_three_labels():
    true = ["positive", "positive", "neutral", "negative", "negative", "neutral"]
    pred = ["positive", "neutral", "neutral", "negative", "positive", "positive"]
    assert confusion_matrix(true, pred, LABELS).tolist() == [[1, 1, 0], [1, 1, 0], [1, 0, 1]]
    # F1: positive 2*1/(2+2+1) = 0.4, neutral 2*1/(2+1+1) = 0.5, negative 2*1/(2+0+1) = 2/3
    assert macro_f1(true, pred, LABELS) == pytest.approx((0.4 + 0.5 + 2 / 3) / 3)
    rates = one_vs_rest_rates(true, pred, LABELS)
    assert rates["positive"] == {"tpr": 0.5, "fpr": 0.5}  # 2 of 4 non-positive items called positive
    assert rates["negative"] == {"tpr": 0.5, "fpr": 0.0}
    # kappa: p_o = 3/6; row sums (2,2,2), column sums (3,2,1): p_e = (6+4+2)/36 = 1/3
    assert cohen_kappa(true, pred, LABELS) == pytest.approx((0.5 - 1 / 3) / (1 - 1 / 3))


def test_binary_rates_hand_computed_and_undefined():
    assert binary_rates([1, 0, 1, 0, 0], [1, 1, 0, 0, 0]) == {"tpr": 0.5, "fpr": 1 / 3}
    r = binary_rates([1, 0], [0, 0])
    assert math.isnan(r["tpr"]) and r["fpr"] == 0.5


def test_degenerate_cases():
    assert math.isnan(cohen_kappa(["a", "a"], ["a", "a"], ["a", "b"]))
    assert math.isnan(macro_f1([], [], LABELS))
    assert cohen_kappa(["a", "b"], ["a", "b"], ["a", "b"]) == 1.0


def test_unknown_label_and_length_mismatch_are_errors():
    with pytest.raises(ValueError, match="outside the label set"):
        confusion_matrix(["positive"], ["happy"], LABELS)
    with pytest.raises(ValueError, match="one label per item"):
        cohen_kappa(["positive"], [], LABELS)


def _direct(true, pred, labels):
    """Loop implementation of the per-label counts, F1 and kappa."""
    n = len(true)
    f1s, p_e = [], 0.0
    for lab in labels:
        tp = sum(1 for t, p in zip(true, pred, strict=True) if t == lab and p == lab)
        fp = sum(1 for t, p in zip(true, pred, strict=True) if t != lab and p == lab)
        fn = sum(1 for t, p in zip(true, pred, strict=True) if t == lab and p != lab)
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
        p_e += (sum(t == lab for t in true) / n) * (sum(p == lab for p in pred) / n)
    p_o = sum(t == p for t, p in zip(true, pred, strict=True)) / n
    return sum(f1s) / len(f1s), (p_o - p_e) / (1 - p_e)


@pytest.mark.parametrize("seed", range(5))
def test_random_against_loops_and_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 200))
    true = list(rng.choice(LABELS, n, p=[0.5, 0.2, 0.3]))
    pred = [t if rng.random() < 0.7 else str(rng.choice(LABELS)) for t in true]
    f1_loop, kappa_loop = _direct(true, pred, LABELS)
    assert macro_f1(true, pred, LABELS) == pytest.approx(f1_loop)
    assert cohen_kappa(true, pred, LABELS) == pytest.approx(kappa_loop)
    present = [lab for lab in LABELS if lab in true or lab in pred]
    assert macro_f1(true, pred, LABELS) == pytest.approx(skm.f1_score(true, pred, labels=present, average="macro"))
    assert cohen_kappa(true, pred, LABELS) == pytest.approx(skm.cohen_kappa_score(true, pred, labels=LABELS))
    assert np.array_equal(confusion_matrix(true, pred, LABELS), skm.confusion_matrix(true, pred, labels=LABELS))
    for lab, r in one_vs_rest_rates(true, pred, LABELS).items():
        d = [int(p == lab) for p in pred]
        t = [int(x == lab) for x in true]
        ref = binary_rates(d, t)
        assert r["tpr"] == pytest.approx(ref["tpr"], nan_ok=True)
        assert r["fpr"] == pytest.approx(ref["fpr"], nan_ok=True)
        if 0 < sum(t) < n:
            assert r["tpr"] == pytest.approx(skm.recall_score(t, d))
