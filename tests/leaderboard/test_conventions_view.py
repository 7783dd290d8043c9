"""The counters' "Conventions" tab: each model's accuracy under every scoring convention of one benchmark, its
spread, the pairs whose order depends on the convention and Kendall's tau between the conventions' rankings."""

from __future__ import annotations

import pandas as pd
import pytest
from scipy import stats
from tests.fixtures.board import app_test
from tests.fixtures.synthetic_store import FamilySpec, make_store

import conventions
from countboard.index import build_index
from countboard.models.conventions import CONVENTION_KEYS
from countboard.schema import load_schema

MODELS = ["vlm_a", "vlm_b", "vlm_c"]
GROUP = "f_counters_conventions_group"  # the tab's benchmark picker (sections.Ctx.one_group)
# accuracy per model under each convention: the strict rules and the substring test order the models differently
VALUES = {
    "conv_lmms_eval_countbench": [80.0, 60.0, 40.0],
    "conv_lmms_eval_countbenchqa": [30.0, 55.0, 20.0],
    "conv_lmms_eval_pixmo_count": [85.0, 70.0, 45.0],
    "conv_vlmevalkit_countbenchqa": [90.0, 95.0, 60.0],
    "conv_vlmevalkit_tallyqa": [84.0, 66.0, 44.0],
    "conv_countboard": [86.0, 72.0, 46.0],
}


def _long() -> pd.DataFrame:
    return pd.DataFrame([{"label": m, "convention": k, "accuracy": v[i]} for k, v in VALUES.items()
                         for i, m in enumerate(MODELS)])


def test_spread_swaps_and_tau_on_known_values():
    long = _long()
    spread = conventions.spread_table(long).set_index("Model")
    assert spread.loc["vlm_a", "Spread"] == 60.0 and spread.loc["vlm_a", "Lowest"] == "conv_lmms_eval_countbenchqa"
    assert spread.loc["vlm_b", "Highest"] == "conv_vlmevalkit_countbenchqa"
    swaps = conventions.swapped_pairs(long)
    assert swaps[["a", "b"]].values.tolist() == [["vlm_a", "vlm_b"]]  # b beats a under the two CountBenchQA rules
    assert set(swaps.loc[0, "b better under"].split(", ")) == {"conv_lmms_eval_countbenchqa",
                                                                  "conv_vlmevalkit_countbenchqa"}
    tau = conventions.tau_matrix(long)
    for a in VALUES:
        for b in VALUES:
            assert tau.loc[a, b] == pytest.approx(stats.kendalltau(VALUES[a], VALUES[b]).statistic)
    assert tau.loc["conv_lmms_eval_countbench", "conv_countboard"] == 1.0
    assert tau.loc["conv_lmms_eval_countbench", "conv_vlmevalkit_countbenchqa"] == pytest.approx(1 / 3)


def test_the_counters_family_declares_every_convention():
    fig = next(f for f in load_schema().families["counters"].figures if f.kind == "conventions")
    assert tuple(fig.get("keys")) == CONVENTION_KEYS
    assert all(load_schema().metrics[k].higher_is_better for k in CONVENTION_KEYS)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("conventions_store")
    made = make_store(root, [FamilySpec("counters", {"mae": False}, MODELS, ["countbench"], task="classic"),
                             FamilySpec("counters", {"mae": False}, ["owlv2"], ["fsc147"], task="classic")],
                      seed=3, with_artifacts=False)
    client = MlflowClient(tracking_uri=made.uri)
    runs = made.values.set_index("model").run_id
    for key, values in VALUES.items():
        for model, value in zip(MODELS, values, strict=True):
            client.log_metric(runs[model], key, value)
    build_index(made.uri, root / "index.duckdb")
    return root / "index.duckdb"


def _open(monkeypatch, db):
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(db))
    at = app_test("views/counters.py", section="counters").run()
    assert not at.exception, [e.value for e in at.exception]
    at.session_state["f_counters_figure"] = "Conventions"
    at = at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.slow  # a real store, indexed, and the page under AppTest
def test_the_tab_shows_the_spread_and_that_the_ranking_changes(monkeypatch, store):
    at = _open(monkeypatch, store)
    at.selectbox(key=GROUP).set_value("countbench · test").run()  # one benchmark at a time
    frames = [df.value for df in at.dataframe]
    spread = next(f for f in frames if "Spread" in f.columns)
    assert len(spread) == 3 and spread["Spread"].max() == pytest.approx(60.0)
    names = {k: load_schema().metrics[k].display.removesuffix(" (%)") for k in VALUES}
    tau = next(f for f in frames if names["conv_countboard"] in f.columns and len(f) == len(VALUES))
    assert tau.loc[names["conv_lmms_eval_countbench"], names["conv_vlmevalkit_countbenchqa"]] == pytest.approx(
        round(1 / 3, 3))
    assert any("ranking changes" in w.value for w in at.warning)
    assert any(c.proto.id and "conventions" in c.proto.id for c in at.get("plotly_chart"))


@pytest.mark.slow
def test_a_benchmark_without_models_asked_in_words_says_where_conventions_come_from(monkeypatch, store):
    at = _open(monkeypatch, store)
    at.selectbox(key=GROUP).set_value("fsc147 · test").run()
    assert any("model asked in words" in i.value for i in at.info)


def test_the_scores_table_keeps_the_columns_some_run_reports():
    from countboard.index.praco_table import table_csv, table_latex
    from countboard.index.scores_table import scores_caption, scores_table

    rows = pd.DataFrame({"model": ["vlm_a", "vlm_a", "owlv2"], "dataset": "d", "split": "test",
                         "task": ["classic", "classic", "classic"], "end_time": [2, 1, 3],
                         "mae": [1.5, 9.0, 4.0], "smape": [10.0, 50.0, 20.0], "det_ap": [None, None, 33.3],
                         "conv_vlmevalkit_countbenchqa": [88.0, 10.0, None], "conv_countboard": [None, None, None]})
    table, columns = scores_table(rows, "d")
    assert [c[1] for c in columns] == ["MAE", "sMAPE", "AP", "VLMEvalKit CountBenchQA"]  # no run has ours here
    assert table.set_index("Method").loc["vlm_a"].tolist()[:2] == [1.5, 10.0]  # the latest run of the model
    tex = table_latex(table, scores_caption("d", "test"), "tab:x", columns)
    assert r"\multicolumn{2}{c}{Counts}" in tex and "AP $\\uparrow$" in tex and "sMAPE $\\downarrow$" in tex
    assert "owlv2 & 4.00 & 20.00 & 33.30 & -- \\\\" in tex
    assert table_csv(table, columns).splitlines()[0] == "Method,MAE,sMAPE,AP,VLMEvalKit CountBenchQA"


@pytest.mark.slow
def test_the_counters_page_offers_the_scores_table(monkeypatch, store):
    at = _open(monkeypatch, store)
    at.selectbox(key="scores_table_dataset").set_value("countbench").run()
    table = next(df.value for df in at.dataframe if "lmms countbench" in df.value)
    assert table.set_index("Method").loc["vlm_b", "VLMEvalKit CountBenchQA"] == 95.0
    assert {b.proto.label for b in at.get("download_button")} >= {"CSV", "LaTeX"}


@pytest.mark.parametrize("dataset", ["pixmo_count", "tallyqa", "capture", "fscd147", "countqa", "mucca"])
def test_the_scores_table_knows_each_new_benchmark(dataset):
    from countboard.index.praco_table import table_latex
    from countboard.index.scores_table import BENCHMARKS, SCORE_COLUMNS, scores_caption, scores_table

    keys = [c[2] for c in SCORE_COLUMNS]
    rows = pd.DataFrame([{"model": m, "dataset": dataset, "split": "test", "task": "classic", "end_time": 1,
                          **{k: 10.0 + i + j for j, k in enumerate(keys)}} for i, m in enumerate(["vlm", "owlv2"])])
    table, columns = scores_table(rows, dataset)
    name, reported = BENCHMARKS[dataset]
    headers = {c[2]: c[1] for c in SCORE_COLUMNS}
    shown = [c[2] for c in columns]
    assert sorted(shown) == sorted(keys)  # every column some run reports
    groups = [c[0] for c in columns]
    assert groups == sorted(groups, key=groups.index)  # each group's columns side by side
    assert shown[0] in reported  # the table opens with a metric the publisher reports
    caption = scores_caption(dataset, "test")
    assert caption.endswith(f"{name} reports {', '.join(headers[k] for k in reported)} (first).")
    assert table.set_index("Method").loc["owlv2", headers[shown[0]]] == 11.0 + keys.index(shown[0])
    assert table_latex(table, caption, columns=columns).count(r"\multicolumn") == len(set(groups))
