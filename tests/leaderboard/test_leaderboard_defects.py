"""One regression test per defect of the leaderboard views (issue 13): each fails on the views as they were."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import figures
import ranking
import widgets
from countboard.quantify.beta import beta_from_interval
from countboard.quantify.compare import pairwise_prob_greater
from countboard.schema import IntervalInfo, MetricInfo, load_schema

ACC = MetricInfo(key="acc", display="Acc", higher_is_better=True, family="f")


def _confusion_long() -> pd.DataFrame:
    """GeckoNum Task 1 long confusion table, columns in the order the scorer writes them."""
    answered = [str(i) for i in range(11)] + ["10+", "range"]
    rows = [(n, a, 1.0 if a == str(n) else 0.0) for n in range(1, 11) for a in answered]
    rows += [(3, "10+", 0.5), (4, "range", 0.25)]
    return pd.DataFrame(rows, columns=["prompt_number", "answered", "share"])


def test_confusion_heatmap_orders_numbers_by_value_and_keeps_10_plus_and_ranges():
    fig = figures.matrix_heatmap(_confusion_long(), "prompt_number", "answered", "share", "t")
    heat = fig.data[0]
    assert list(heat.x) == [str(i) for i in range(11)] + ["10+", "range"]  # "10" after "9", not after "1"
    assert list(heat.y) == [str(i) for i in range(1, 11)]
    z = np.array(heat.z, dtype=float)
    assert not np.isnan(z).any()  # "10+" and "range" are cells, not NaN
    assert z[2, list(heat.x).index("10+")] == pytest.approx(0.25)  # mean of 0 and 0.5
    assert fig.layout.xaxis.type == "category" and fig.layout.yaxis.type == "category"


def test_category_order_against_numeric_sort():
    rng = np.random.default_rng(0)
    values = [str(v) for v in rng.permutation(25)]
    assert figures.category_order(values) == [str(v) for v in range(25)]
    assert figures.category_order(["3-4", "3", "2", "2+", "many"]) == ["2", "2+", "3", "3-4", "many"]


def test_heatmap_colour_scale_starts_at_zero_for_counts_and_rates():
    df = pd.DataFrame({"r": ["a", "a", "b"], "c": ["x", "y", "x"], "v": [2.0, 3.0, 5.0]})
    assert figures.matrix_heatmap(df, "r", "c", "v", "t").data[0].zmin == 0
    neg = df.assign(v=[-1.0, 3.0, 5.0])
    assert figures.matrix_heatmap(neg, "r", "c", "v", "t").data[0].zmin == -1.0


def test_drift_boxplot_shows_the_distractor_count_beside_it():
    pairs = pd.DataFrame({"label": ["blind"] * 3, "drift": [0.0, 0.0, 0.0], "c_neg": [4.0, 5.0, 6.0]})
    fig = figures.box(pairs, "label", "drift", "t", beside="c_neg", names=("drift", "c_neg"))
    panels = {tr.yaxis or "y": list(tr.y) for tr in fig.data}
    assert sorted(panels.values()) == [[0.0, 0.0, 0.0], [4.0, 5.0, 6.0]]  # a class-blind counter shows c_neg > 0


def test_ties_share_a_rank_and_overlapping_intervals_share_a_rank_range():
    assert list(ranking.competition_ranks([0.7, 0.9, 0.7, 0.5], True)) == [2, 1, 2, 4]
    assert list(ranking.competition_ranks([3.0, 1.0, 1.0], False)) == [3, 1, 1]
    df = pd.DataFrame({"model": ["a", "b", "c", "d"], "dataset": ["d"] * 4, "split": ["s"] * 4,
                       "acc": [0.9, 0.8, 0.8, 0.2], "experiment_id": ["1"] * 4, "run_id": list("wxyz")})
    assert widgets.ranking_frame(df, [], ACC)["rank"].tolist() == ["1", "2", "2", "4"]
    iv = IntervalInfo("lo", "hi", 0.9)
    with_iv = df.assign(lo=[0.85, 0.7, 0.75, 0.1], hi=[0.95, 0.88, 0.86, 0.3])
    assert widgets.ranking_frame(with_iv, [], ACC, iv)["rank"].tolist() == ["1–3", "1–3", "1–3", "4"]


def test_rank_ranges_against_brute_force():
    rng = np.random.default_rng(3)
    mean = rng.random(7)
    half = rng.random(7) * 0.2
    best, worst = ranking.rank_ranges(mean, mean - half, mean + half, True)
    for i in range(7):
        surely_ahead = sum(mean[j] - half[j] > mean[i] + half[i] for j in range(7))
        surely_behind = sum(mean[j] + half[j] < mean[i] - half[i] for j in range(7))
        assert best[i] == 1 + surely_ahead and worst[i] == 7 - surely_behind


def test_ranks_within_groups_against_a_loop_over_each_group():
    """Groups with missing keys, ties, missing values and intervals: each row ranked against its group only."""
    rng = np.random.default_rng(5)
    n = 60
    df = pd.DataFrame({"dataset": rng.choice(["a", "b", None], n), "split": rng.choice(["s", "t"], n),
                       "acc": np.round(rng.random(n), 1), "lo": rng.random(n) * 0.5})
    df.loc[::7, "acc"] = np.nan
    df["hi"] = df.lo + rng.random(n) * 0.5
    for interval in (None, IntervalInfo("lo", "hi", 0.9)):
        got = widgets.rank_column(df, ACC, interval, ["dataset", "split"])
        want = [""] * n
        for _, part in df.groupby(["dataset", "split"], dropna=False):
            mean = part.acc.to_numpy()
            if interval is None:
                best = worst = ranking.competition_ranks(mean, True)
            else:
                best, worst = ranking.rank_ranges(mean, part.lo.to_numpy(), part.hi.to_numpy(), True)
            for pos, b, w in zip(part.index, best, worst, strict=True):
                want[pos] = ranking.rank_label(b, w)
        assert got == want
    assert widgets.rank_column(df.iloc[:0], ACC, None, ["dataset", "split"]) == []


def test_ranking_table_keeps_the_sort_column_next_to_the_model_and_prints_no_none():
    df = pd.DataFrame({"model": ["a", "b"], "dataset": ["d", None], "split": ["s", "s"], "evaluator": [None, None],
                       "acc": [0.9, np.nan], "other": [1.0, 2.0], "experiment_id": ["1", "1"], "run_id": ["r", "q"]})
    other = MetricInfo(key="other", display="Other", higher_is_better=False, family="f")
    frame = widgets.ranking_frame(df, [other], ACC, extra=("evaluator",))
    assert list(frame.columns[:3]) == ["rank", "model", "acc"]
    assert frame["rank"].tolist() == ["1", "—"] and frame.dataset.tolist() == ["d", "—"]
    assert frame.evaluator.tolist() == ["—", "—"]
    shown = frame.style.format({"acc": lambda v: widgets.format_value(v, ".3f")}, na_rep="—").to_string()
    assert "None" not in shown and "nan" not in shown.lower()


def test_prob_greater_from_intervals_calls_the_quantify_implementation():
    """The leaderboard's P(A > B) is the quantify one on moment-matched Betas; checked by sampling."""
    mean, low, high = np.array([0.6, 0.5]), np.array([0.5, 0.45]), np.array([0.7, 0.55])
    p = ranking.prob_greater_intervals(["a", "b"], mean, low, high, 0.9)
    ab = [beta_from_interval(m, lo, hi, 0.9) for m, lo, hi in zip(mean, low, high, strict=True)]
    np.testing.assert_allclose(p, pairwise_prob_greater(["a", "b"], [a for a, _ in ab], [b for _, b in ab]))
    rng = np.random.default_rng(1)
    draws = [rng.beta(a, b, 200_000) for a, b in ab]
    assert p[0, 1] == pytest.approx((draws[0] > draws[1]).mean(), abs=0.01)
    sd = (high - low) / (2 * stats.norm.ppf(0.95))
    var = [a * b / ((a + b) ** 2 * (a + b + 1)) for a, b in ab]
    np.testing.assert_allclose(np.sqrt(var), sd, rtol=1e-9)


def test_one_prob_greater_in_the_leaderboard():
    import inspect

    import sections
    from countboard.quantify import ranks

    assert not hasattr(figures, "prob_greater_normal") and not hasattr(figures, "prob_greater_draws")
    assert ranking.prob_greater_normal is ranks.prob_greater_normal  # the board's is the shared one
    assert "pairwise_prob_greater" in inspect.getsource(ranks)
    assert "stats.norm.cdf" not in inspect.getsource(sections)


def test_every_metric_that_has_an_interval_declares_it_in_the_schema():
    schema = load_schema()
    declared = {m.interval.low for m in schema.metrics.values() if m.interval} | \
               {m.interval.high for m in schema.metrics.values() if m.interval}
    bounds = {k for k in schema.metrics if k.endswith(("_low", "_high", "_ci_low", "_ci_high"))
              and not k.startswith(("autoeval_bcc_rate_", "numeracy_accuracy_ci_", "acs_bcc_", "acs_mc_"))}
    assert declared >= {"numeracy_accuracy_ci_low", "autoeval_bcc_rate_high", "acs_bcc_low", "acs_mc_high"}
    assert not bounds - declared, f"interval bounds not tied to their metric: {sorted(bounds - declared)}"
    for fam in schema.families.values():
        if fam.key != "engine":
            assert fam.page, f"family {fam.key} names no leaderboard page"


def test_two_counters_0004_apart_on_24_images_share_a_rank_range():
    """Issue 25: CntF1 was ranked without an interval, so 0.004 on 24 images made two ranks. With the bootstrap
    interval each run logs, overlapping intervals share the range 1–2."""
    from countboard.metrics import bootstrap as bs

    rng = np.random.default_rng(24)
    per_image = rng.beta(8, 2, 24)
    runs = {"a": per_image, "b": per_image - 0.004}
    rows = []
    for model, values in runs.items():
        stat = bs.UnitStatistic((values,), bs.mean)
        lo, hi = bs.bootstrap_interval(stat)
        rows.append({"model": model, "dataset": "fsc147", "split": "test", "cnt_f1": stat.value(),
                     "cnt_f1__low": lo, "cnt_f1__high": hi, "n_mosaic_images": 24, "experiment_id": "1",
                     "run_id": f"run_{model}"})
    df = pd.DataFrame(rows)
    assert df.cnt_f1[0] - df.cnt_f1[1] == pytest.approx(0.004)
    sort = load_schema().metric("cnt_f1")
    assert sort.interval is not None and sort.interval.low == "cnt_f1__low"
    assert widgets.ranking_frame(df, [], sort)["rank"].tolist() == ["1", "2"]  # without the interval
    frame = widgets.ranking_frame(df, [], sort, sort.interval)
    assert frame["rank"].tolist() == ["1–2", "1–2"]
    assert frame["n_mosaic_images"].tolist() == [24, 24]


def test_prob_greater_of_bootstrap_intervals_against_sampling():
    mean, low, high = np.array([3.0, 3.4, 9.0]), np.array([2.0, 2.6, 8.0]), np.array([4.0, 4.2, 10.0])
    p = ranking.prob_greater_normal(mean, low, high, 0.9)
    rng = np.random.default_rng(2)
    sd = (high - low) / (2 * stats.norm.ppf(0.95))
    draws = rng.normal(mean[:, None], sd[:, None], (3, 200_000))
    assert p[0, 1] == pytest.approx((draws[0] > draws[1]).mean(), abs=0.01)
    np.testing.assert_allclose(p + p.T, 1.0)
    assert p[2, 0] > 0.999


def test_interval_bounds_are_not_offered_as_metrics_to_rank_by():
    """Bootstrap bounds are declared with their metric (``bound_of``) and shown beside it, never as a choice."""
    schema = load_schema()
    bounds = [m for m in schema.metrics.values() if m.bound_of]
    assert {"cnt_f1__low", "nmn__high", "iou_soft__low", "mc_mae_macro__high"} <= {m.key for m in bounds}
    for m in bounds:
        owner = schema.metric(m.bound_of)
        assert m.key in (owner.interval.low, owner.interval.high) and m.higher_is_better == owner.higher_is_better
