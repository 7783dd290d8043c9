"""The statistics behind the charts, against direct loops and hand-computed cases."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import figures


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
    frame = widgets.ranking_frame(df, [acc], acc)
    assert list(frame.task) == ["t1", "t1", "t2", "t2", "t1"] and list(frame["rank"]) == ["1", "2", "1", "2", "1"]
    assert frame.run.iloc[0] == "http://ui:5000/#/experiments/1/runs/r0?workflowType=machine_learning"
    merged = widgets.ranking_frame(df[df.task == "t1"], [acc], acc)
    assert "task" not in merged and list(merged["rank"]) == ["1", "2", "1"]


def test_pairwise_heatmap_leaves_the_diagonal_blank():
    import ranking

    p = ranking.prob_greater_intervals(["a", "b", "c"], [0.6, 0.5, 0.4], [0.5, 0.4, 0.3], [0.7, 0.6, 0.5], 0.9)
    z = np.array(figures.pairwise_heatmap(p, ["a", "b", "c"], "t").data[0].z, dtype=float)
    assert np.isnan(np.diag(z)).all()
    off = ~np.eye(3, dtype=bool)
    np.testing.assert_allclose(z[off], p[off])


def test_quartile_boxes_draw_the_given_quartiles():
    bins = pd.DataFrame({"entry": ["a", "a", "b", "b"], "low": [0.0, 0.5, 0.0, 0.5], "high": [0.5, 1.0, 0.5, 1.0],
                         "n": [3.0, 0.0, 2.0, 4.0], "q1": [1.0, np.nan, 0.5, 2.0], "median": [2.0, np.nan, 1.0, 3.0],
                         "q3": [3.0, np.nan, 1.5, 4.0]})
    fig = figures.quartile_boxes(bins, "t")
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(fig.data[0].x) == ["0.00–0.50"] and list(fig.data[0].median) == [2.0]   # empty bins left out
    assert list(fig.data[1].q1) == [0.5, 2.0] and list(fig.data[1].q3) == [1.5, 4.0]


def test_calibration_and_error_charts_draw_the_replicate_table():
    from countboard.quantify.validation import replicate_calibration

    rng = np.random.default_rng(0)
    h = (rng.random(600) < 0.4).astype(int)
    d = np.where(h == 1, rng.random(600) < 0.8, rng.random(600) < 0.1).astype(int)
    table = replicate_calibration(d, h, [25, 100], replicates=20, levels=[0.5, 0.9], draws=200)
    cal = figures.calibration_chart(table[table.n_human == 25], "c")
    names = [t.name for t in cal.data]
    assert names == ["bcc", "cc", "human", "nominal"]
    bcc = next(t for t in cal.data if t.name == "bcc")
    assert list(bcc.x) == [0.5, 0.9] and list(bcc.y) == list(table[(table.method == "bcc") & (table.n_human == 25)]
                                                             .sort_values("level").coverage)
    err = figures.error_chart(table.drop_duplicates(["method", "n_human"]), "e")
    assert [list(t.x) for t in err.data] == [[25, 100]] * 3
