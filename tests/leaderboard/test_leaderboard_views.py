"""Views on purpose-built stores: GeckoNum tasks kept apart, intervals kept whatever the ranked metric, Overview
links and best entries, the Runs page comparison and a store moved to another folder."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from tests.fixtures.board import app_test
from tests.fixtures.synthetic_store import FamilySpec, make_store

from countboard.escaping import md
from countboard.index import build_index
from countboard.index.artifacts import relocate_artifact_uri
from countboard.paths import leaderboard_dir
from countboard.schema import load_schema

APP = leaderboard_dir() / "app.py"
GECKO = {"numeracy_accuracy": True, "numeracy_accuracy_ci_low": None, "numeracy_accuracy_ci_high": None}
MODELS = ["gen_a", "gen_b", "gen_c"]


def open_page(monkeypatch, db, page: str, section: str | None = None) -> AppTest:
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(db))
    monkeypatch.setenv("COUNTBOARD_MLFLOW_UI", "http://ui.example:5000")
    return app_test(page, section=section).run()


@pytest.fixture(scope="module")
def two_tasks(tmp_path_factory):
    """GeckoNum Tasks 1 and 2 of three generators: the task-2 values are the task-1 ones in reverse order."""
    root = tmp_path_factory.mktemp("gecko_tasks")
    specs = [FamilySpec("generators", GECKO, MODELS, ["geckonum"], task="geckonum_human_t1", model_kind="generator"),
             FamilySpec("generators", GECKO, MODELS[::-1], ["geckonum"], task="geckonum_human_t2",
                        model_kind="generator")]
    store = make_store(root, specs, seed=2, with_artifacts=False)
    build_index(store.uri, root / "index.duckdb")
    return store, root / "index.duckdb"


def plotly_values(v) -> list[float]:
    """A trace's values as Plotly sends them: a list, or a typed array (``dtype`` + base64 ``bdata``)."""
    if isinstance(v, dict):
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).astype(float).tolist()
    return [float(x) for x in v]


def open_figure(at: AppTest, family: str, tab: str) -> AppTest:
    """Open the figure tab ``tab`` of ``family``'s section (only the open tab's figure is drawn) and rerun."""
    at.session_state[f"f_{family}_figure"] = tab
    return at.run()


def chart(at: AppTest, key_part: str) -> dict:
    for c in at.get("plotly_chart"):
        if key_part in (c.proto.id or "") or key_part in c.proto.spec:
            return json.loads(c.proto.spec)
    raise AssertionError(f"no chart {key_part!r} on the page")


def test_numeracy_tasks_are_ranked_and_compared_apart(monkeypatch, two_tasks):
    store, db = two_tasks
    at = open_page(monkeypatch, db, "views/numeracy.py", section="generators")
    assert not at.exception, [e.value for e in at.exception]
    level = at.selectbox(key="f_generators_level_task")
    assert level.options == ["geckonum_human_t1", "geckonum_human_t2"]
    for task in level.options:
        at.selectbox(key="f_generators_level_task").set_value(task).run()
        table = at.dataframe[0].value
        runs = store.values.assign(task=["geckonum_human_t1"] * 3 + ["geckonum_human_t2"] * 3)
        expected = runs[runs.task == task].sort_values("numeracy_accuracy", ascending=False)
        assert list(table.model) == list(expected.model)
        assert table.numeracy_accuracy.tolist() == pytest.approx(expected.numeracy_accuracy.tolist())
        spec = chart(at, "and its 95% interval")
        xs = [x for tr in spec["data"] if tr.get("error_x") for x in plotly_values(tr["x"])]
        assert sorted(xs) == pytest.approx(sorted(expected.numeracy_accuracy))  # one task's rows only
        pair = chart(open_figure(at, "generators", "P(A > B)"), "P(A better than B)")
        assert len(pair["data"][0]["x"]) == len(MODELS)
        open_figure(at, "generators", "Interval")


def test_ranking_by_another_metric_keeps_its_interval_and_pairwise(monkeypatch, filled_index):
    _, db = filled_index
    at = open_page(monkeypatch, db, "views/acs.py")
    other = next(m for m in load_schema().family_metrics("acs")
                 if m.interval and m.key != load_schema().families["acs"].main_metric)
    at.selectbox(key="f_acs_sort").set_value(other.key).run()
    assert not at.exception, [e.value for e in at.exception]
    assert chart(at, f"{other.display} and its")
    assert chart(open_figure(at, "acs", "P(A > B)"), f"P(A better than B) by {other.display}")
    assert len(at.get("plotly_chart")) == 1  # only the open tab's figure is drawn
    table = at.dataframe[0].value
    assert list(table.columns[:5]) == ["rank", "model", other.key, other.interval.low, other.interval.high]
    no_iv = next(m for m in load_schema().family_metrics("acs") if m.interval is None and m.higher_is_better)
    at.selectbox(key="f_acs_sort").set_value(no_iv.key).run()
    assert "has none in the schema" in " ".join(i.value for i in at.info)  # said, not silently dropped


def test_overview_links_each_family_to_its_own_section_and_shows_its_best_entry(monkeypatch, filled_index):
    store, db = filled_index
    at = open_page(monkeypatch, db, "views/overview.py")
    links = {p.proto.label: p.proto for p in at.get("page_link")}
    for fam in load_schema().families.values():
        if not fam.page:
            continue
        link = next(v for k, v in links.items() if k.startswith(fam.display + ":"))
        assert link.page.endswith(fam.page) or fam.page in link.page
        assert link.query_string == f"section={fam.key}"
    text = " ".join(m.value for m in at.markdown)
    best = store.values[store.values.family == "counters"].sort_values("cnt_f1", ascending=False).iloc[0]
    assert f"Best: **{md(best.model)}**" in text  # the name as typed: escaped for markdown
    assert "interval)" in text  # the families with an interval show it
    assert [m.label for m in at.metric][:3] == ["Runs", "Finished", "Failed"]


def test_runs_page_compares_selected_runs(monkeypatch, filled_index):
    store, db = filled_index
    at = open_page(monkeypatch, db, "views/runs.py")
    at.session_state["runs_table"] = {"selection": {"rows": [0, 1], "columns": [], "cells": []}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    ids = list(at.dataframe[0].value.run_id[:2])
    button = at.get("link_button")[0].proto
    assert button.url.startswith("http://ui.example:5000/#/compare-runs?runs=")
    assert all(i in button.url for i in ids)
    assert any("side by side" in s.value for s in at.subheader)


def test_sweep_filter_shows_parent_and_children(monkeypatch, filled_index):
    store, db = filled_index
    at = open_page(monkeypatch, db, "views/runs.py")
    sweep = store.sweep_run_ids[0]
    at.selectbox(key="runs_sweep").set_value(sweep).run()
    table = at.dataframe[0].value
    assert table.run_id.iloc[0] == sweep and bool(table.is_sweep.iloc[0])
    assert (table.parent_run_id.iloc[1:] == sweep).all() and len(table) > 1


def test_relocate_artifact_uri():
    assert relocate_artifact_uri("file:///a/s/artifacts/1/r/artifacts", "/a/s", "/b/t") == \
        "file:///b/t/artifacts/1/r/artifacts"
    assert relocate_artifact_uri("file:///elsewhere/x", "/a/s", "/b/t") == "file:///elsewhere/x"
    assert relocate_artifact_uri("file:///a/s/x", None, "/b/t") == "file:///a/s/x"


def test_a_moved_store_still_shows_its_artifacts(monkeypatch, tmp_path):
    specs = [FamilySpec("counters", {"cnt_f1": True, "nmn": False}, ["m1", "m2"], ["fsc147"], task="praco_mosaic",
                        model_kind="counter")]
    store = make_store(tmp_path / "old", specs, seed=1)
    build_index(store.uri, tmp_path / "old" / "index.duckdb")
    shutil.move(tmp_path / "old", tmp_path / "new")  # the store and its index move together
    monkeypatch.delenv("COUNTBOARD_STORE", raising=False)
    at = open_figure(open_page(monkeypatch, tmp_path / "new" / "index.duckdb", "views/counters.py"), "counters",
                     "Density maps")
    assert not at.exception, [e.value for e in at.exception]
    assert at.get("image"), [i.value for i in at.info]
    assert "none of the selected runs has the artifact" not in " ".join(i.value for i in at.info)


def test_intervals_and_pairwise_compare_entries_of_one_dataset(monkeypatch, filled_index):
    store, db = filled_index
    family = next(f for f in load_schema().families.values()
                  if (store.values.family == f.key).any() and store.values[store.values.family == f.key].dataset
                  .nunique() > 1)
    at = open_page(monkeypatch, db, f"views/{family.page}.py", section=family.key)
    assert not at.exception, [e.value for e in at.exception]
    for title, tab in (("P(A better than B)", "P(A > B)"), ("and its", "Interval")):
        spec = chart(open_figure(at, family.key, tab), title)
        labels = {str(y) for tr in spec["data"] for y in (tr.get("y") if isinstance(tr.get("y"), list) else [])}
        datasets = {d for d in store.values.dataset.unique() if any(d in lab for lab in labels)}
        assert len(datasets) == 1, (title, labels)


def test_counters_page_offers_the_papers_table_in_both_conventions(monkeypatch, tmp_path):
    """An imported PrACo result appears in the paper-layout table; the convention switch changes CntR only."""
    from tests.fixtures.praco_release import MODEL, write_release

    from countboard.counting.released.importer import import_praco
    from countboard.index.builder import build_index
    from countboard.tracking.store import open_store

    release = write_release(tmp_path / "rel")
    tracker = open_store(str(tmp_path / "mlruns"), create=True)
    metrics = import_praco(release["model_dir"], release["meta"], tracker, exclude=release["exclude"]).scored.metrics
    build_index(tracker.uri, tmp_path / "index.duckdb")
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(tmp_path / "index.duckdb"))
    at = app_test("views/counters.py").run()
    assert not at.exception, [e.value for e in at.exception]

    def paper_table():
        return next(df.value for df in at.dataframe if "Method" in df.value).set_index("Method")

    assert paper_table().loc[MODEL, "CntR"] == pytest.approx(metrics["cnt_recall"])
    assert any("paper" in c.value.lower() for c in at.caption)
    at.radio(key="praco_table_convention").set_value("released").run()
    table = paper_table()
    assert table.loc[MODEL, "CntR"] == pytest.approx(metrics["official_avg_cnt_recall"])
    assert table.loc[MODEL, "CntF1"] == pytest.approx(metrics["official_avg_cnt_fscore"])
    assert len(at.get("download_button")) == 2
    shown = next(df for df in at.dataframe if "Method" in df.value)
    assert json.loads(shown.proto.columns)["Method"]["pinned"]  # one table: the method stays in view as it scrolls
