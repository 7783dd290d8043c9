"""The statistics behind the charts, against direct loops and hand-computed cases."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import figures
from generators import interval_keys, siblings


def test_prob_greater_normal_hand_case():
    p = figures.prob_greater_normal(np.array([0.6, 0.4]), np.array([0.5, 0.3]), np.array([0.7, 0.5]))
    sd = 0.2 / (2 * stats.norm.ppf(0.95))
    assert p[0, 1] == pytest.approx(stats.norm.cdf(0.2 / np.sqrt(2 * sd**2)))
    assert p[0, 0] == pytest.approx(0.5)
    assert p[0, 1] + p[1, 0] == pytest.approx(1.0)


def test_prob_greater_normal_matches_sampling():
    rng = np.random.default_rng(0)
    mean = rng.uniform(0.2, 0.8, 4)
    half = rng.uniform(0.02, 0.1, 4)
    p = figures.prob_greater_normal(mean, mean - half, mean + half)
    draws = rng.normal(mean[:, None], (half / figures.Z90)[:, None], size=(4, 200_000))
    for i, j in itertools.permutations(range(4), 2):
        assert p[i, j] == pytest.approx(np.mean(draws[i] > draws[j]), abs=0.01)


def test_prob_greater_draws_matches_loop():
    rng = np.random.default_rng(1)
    d = rng.normal(size=(3, 50))
    p = figures.prob_greater_draws(d)
    for i, j in itertools.product(range(3), repeat=2):
        assert p[i, j] == pytest.approx(sum(d[i, k] > d[j, k] for k in range(50)) / 50)


def test_ranks_and_kendall_against_direct_computation():
    rng = np.random.default_rng(2)
    models, evaluators = [f"m{i}" for i in range(5)], ["e1", "e2", "e3"]
    df = pd.DataFrame([(m, e, rng.random()) for m in models for e in evaluators], columns=["model", "ev", "v"])
    r = figures.ranks(df, "model", "ev", "v", higher_is_better=True)
    for e in evaluators:
        part = df[df.ev == e]
        order = sorted(part.itertuples(), key=lambda t: -t.v)
        expected = {t.model: i + 1 for i, t in enumerate(order)}
        got = dict(zip(r[r.ev == e].model, r[r.ev == e]["rank"], strict=True))
        assert got == expected
    tau = figures.kendall_between(r, "model", "ev")
    for a, b in itertools.combinations(evaluators, 2):
        ra = [r[(r.ev == a) & (r.model == m)]["rank"].iloc[0] for m in models]
        rb = [r[(r.ev == b) & (r.model == m)]["rank"].iloc[0] for m in models]
        pairs = list(itertools.combinations(range(5), 2))
        concordant = sum(np.sign(ra[i] - ra[j]) == np.sign(rb[i] - rb[j]) for i, j in pairs)
        assert tau.loc[a, b] == pytest.approx((2 * concordant - len(pairs)) / len(pairs))
    assert np.allclose(np.diag(tau), 1.0)


def test_lower_is_better_ranks_ascending():
    df = pd.DataFrame({"model": ["a", "b", "c"], "ev": ["x"] * 3, "mae": [3.0, 1.0, 2.0]})
    assert list(figures.ranks(df, "model", "ev", "mae", higher_is_better=False)["rank"]) == [3, 1, 2]


def test_interval_and_sibling_keys_follow_naming():
    keys = ["autoeval_bcc_rate", "autoeval_bcc_rate_low", "autoeval_bcc_rate_high", "autoeval_cc_rate",
            "autoeval_human_rate", "autoeval_n_images", "numeracy_accuracy", "numeracy_accuracy_ci_low",
            "numeracy_accuracy_ci_high"]
    assert interval_keys(keys, "autoeval_bcc_rate") == ("autoeval_bcc_rate_low", "autoeval_bcc_rate_high")
    assert interval_keys(keys, "numeracy_accuracy") == ("numeracy_accuracy_ci_low", "numeracy_accuracy_ci_high")
    assert interval_keys(keys, "autoeval_cc_rate") is None
    got = siblings(keys, "autoeval_bcc_rate", ("autoeval_bcc_rate_low", "autoeval_bcc_rate_high"))
    assert got == ["autoeval_cc_rate", "autoeval_human_rate"]


def test_number_confusion_against_a_loop():
    rng = np.random.default_rng(4)
    targets = [list(map(int, rng.integers(1, 5, rng.integers(1, 3)))) for _ in range(30)]
    counted = [[float(t + rng.integers(-1, 2)) + rng.uniform(-0.4, 0.4) for t in ts] for ts in targets]
    got = figures.number_confusion(pd.Series(map(str, targets)), pd.Series(map(str, counted)))
    expected: dict[tuple[int, int], int] = {}
    for ts, cs in zip(targets, counted, strict=True):
        for t, c in zip(ts, cs, strict=True):
            expected[(t, round(c))] = expected.get((t, round(c)), 0) + 1
    assert {(r.requested, r.counted): r.n for r in got.itertuples()} == expected


def test_ranking_frame_ranks_within_dataset_and_task(monkeypatch):
    import widgets
    from countboard.schema import MetricInfo

    monkeypatch.setenv("COUNTBOARD_MLFLOW_UI", "http://ui:5000")
    acc = MetricInfo(key="acc", display="Acc", higher_is_better=True, family="f")
    df = pd.DataFrame({"model": ["a", "b", "a", "b", "c"], "dataset": ["d1"] * 4 + ["d2"],
                       "split": ["test"] * 5, "task": ["t1", "t1", "t2", "t2", "t1"],
                       "acc": [0.9, 0.8, 0.7, 0.6, 0.5], "experiment_id": ["1"] * 5,
                       "run_id": [f"r{i}" for i in range(5)]})
    frame = widgets.ranking_frame(df, [acc])
    assert list(frame.task) == ["t1", "t1", "t2", "t2", "t1"] and list(frame["rank"]) == [1, 2, 1, 2, 1]
    assert frame.run.iloc[0] == "http://ui:5000/#/experiments/1/runs/r0"
    merged = widgets.ranking_frame(df[df.task == "t1"], [acc])
    assert "task" not in merged and list(merged["rank"]) == [1, 2, 1]


def test_interval_level_is_read_from_the_schema_description(monkeypatch):
    import generators
    from countboard.schema import MetricInfo, Schema

    def info(key, text):
        return MetricInfo(key=key, display=key, higher_is_better=None, family="f", description=text)

    schema = Schema(metrics={"a_low": info("a_low", "Lower end of the equal-tailed 90% credible interval (5% quantile)"),
                             "b_low": info("b_low", "Lower end of the percentile bootstrap 95% interval."),
                             "c_low": info("c_low", "Lower bound.")}, families={})
    monkeypatch.setattr(generators, "load_schema", lambda: schema)
    assert generators.interval_level("a_low") == pytest.approx(0.90)
    assert generators.interval_level("b_low") == pytest.approx(0.95)
    assert generators.interval_level("c_low") == pytest.approx(0.90)  # no level stated: the default
    assert generators.interval_level("missing", default=0.8) == pytest.approx(0.8)


def test_pairwise_heatmap_leaves_the_diagonal_blank():
    p = figures.prob_greater_draws(np.array([[1, 2, 3], [0, 2, 4], [5, 5, 5]]))
    z = np.array(figures.pairwise_heatmap(p, ["a", "b", "c"], "t").data[0].z, dtype=float)
    assert np.isnan(np.diag(z)).all()
    off = ~np.eye(3, dtype=bool)
    np.testing.assert_allclose(z[off], p[off])
    assert not np.isnan(p).any()  # the caller's matrix is not modified
