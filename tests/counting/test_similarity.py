"""The semantic-similarity analysis from the tables the negative tests log (single- and multi-class)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from countboard.counting.similarity import analyse, negative_pairs_of

CLASSES = ["apples", "pears", "cars", "boats"]
EMB = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0], [0.0, 0.6, 0.8]])


def embed(classes):
    return EMB[[CLASSES.index(c) for c in classes]]


def test_single_class_table():
    counts = pd.DataFrame({"image_id": ["a.jpg", "b.jpg"], "class_name": ["apples", "cars"], "gt": [4, 0],
                           "apples": [5.0, 1.0], "pears": [2.0, 0.0], "cars": [0.0, 3.0], "boats": [1.0, 0.5]})
    pairs = negative_pairs_of(counts, embed)
    got = {(r.image, r["class"]): (r.absolute, r.max_sim_to_positive, r.error_norm_by_pos_gt)
           for _, r in pairs.iterrows()}
    assert got == {("a.jpg", "pears"): (2.0, 0.8, 0.5), ("a.jpg", "cars"): (0.0, 0.0, 0.0),
                   ("a.jpg", "boats"): (1.0, 0.0, 0.25),
                   ("b.jpg", "apples"): (1.0, 0.0, 1.0), ("b.jpg", "pears"): (0.0, 0.0, 0.0),
                   ("b.jpg", "boats"): (0.5, pytest.approx(0.8), 0.5)}       # gt 0: the error itself


def test_multi_class_tables_and_pooled_bins():
    counts = pd.DataFrame({"image_id": ["m1"], "apples": [3.0], "pears": [4.0], "cars": [2.0], "boats": [6.0]})
    truth = pd.DataFrame({"image_id": ["m1"], "apples": [2], "pears": [0], "cars": [4], "boats": [0]})
    pairs = negative_pairs_of(counts, embed, truth)
    assert list(pairs["class"]) == ["pears", "boats"]
    assert list(pairs["most_similar_positive"]) == ["apples", "cars"]
    np.testing.assert_allclose(pairs["error_norm_by_pos_gt"], [4.0 / 2, 6.0 / 4])
    rng = np.random.default_rng(0)
    big = pd.DataFrame({"max_sim_to_positive": rng.random(30), "absolute": rng.random(30),
                        "error_norm_by_pos_gt": rng.random(30)})
    corr, bins = analyse({"x": big, "y": big.assign(max_sim_to_positive=big.max_sim_to_positive * 2), "z": pairs})
    assert list(corr["entry"]) == ["x", "y", "z"] and np.isnan(corr.set_index("entry").loc["z", "pearson_r"])
    edges = pd.cut(pd.concat([big.max_sim_to_positive, big.max_sim_to_positive * 2, pairs.max_sim_to_positive]),
                   bins=5, retbins=True)[1]
    for _, part in bins.groupby("entry"):
        np.testing.assert_allclose(part["low"], edges[:-1])
    assert bins.groupby("entry")["n"].sum().to_dict() == {"x": 30, "y": 30, "z": 2}
