"""Generator comparison: pairwise P(p_i > p_j) against a Monte Carlo loop, and input checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from countboard.quantify import QuantifyInputError, generator_comparison, pairwise_prob_greater


def test_pairwise_hand_case():
    m = pairwise_prob_greater(["x", "y", "z"], [2, 1, 1], [1, 1, 1])
    assert np.isnan(np.diag(m)).all()
    assert m[0, 1] == pytest.approx(2 / 3) and m[1, 0] == pytest.approx(1 / 3)
    assert m[1, 2] == pytest.approx(0.5)


def test_pairwise_matches_monte_carlo_loop():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(20, 300, 4), rng.uniform(20, 300, 4)
    m = pairwise_prob_greater(list("abcd"), a, b)
    n = 300_000
    samples = [rng.beta(a[i], b[i], n) for i in range(4)]
    for i in range(4):
        for j in range(4):
            if i != j:
                assert m[i, j] == pytest.approx(np.mean(samples[i] > samples[j]), abs=5e-3)


def test_generator_comparison_picks_one_classifier():
    cells = pd.DataFrame({
        "generator": ["g2", "g1", "g1", "g2"],
        "classifier": ["yolo", "yolo", "detr", "detr"],
        "bcc_alpha": [30.0, 60.0, 40.0, 40.0], "bcc_beta": [70.0, 40.0, 60.0, 60.0],
    })
    out = generator_comparison(cells, "yolo", a_col="bcc_alpha", b_col="bcc_beta")
    assert list(out.index) == ["g1", "g2"] and list(out.columns) == ["g1", "g2"]
    assert out.loc["g1", "g2"] > 0.99
    assert out.loc["g1", "g2"] + out.loc["g2", "g1"] == pytest.approx(1.0)
    detr = generator_comparison(cells, "detr", a_col="bcc_alpha", b_col="bcc_beta")
    assert detr.loc["g1", "g2"] == pytest.approx(0.5)


def test_generator_comparison_errors():
    cells = pd.DataFrame({"generator": ["g1", "g1"], "classifier": ["c", "d"], "a": [1.0, 2.0], "b": [1.0, 2.0]})
    with pytest.raises(QuantifyInputError, match="pass classifier"):
        generator_comparison(cells)
    with pytest.raises(QuantifyInputError, match="no cell of classifier"):
        generator_comparison(cells, "e")
    with pytest.raises(QuantifyInputError, match="lack column"):
        generator_comparison(cells.drop(columns="a"), "c")
    twice = pd.DataFrame({"generator": ["g1", "g1"], "classifier": ["c", "c"], "a": [1.0, 2.0], "b": [1.0, 2.0]})
    with pytest.raises(QuantifyInputError, match="several cells"):
        generator_comparison(twice)
