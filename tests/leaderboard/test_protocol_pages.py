"""The pages keep protocols apart and mark runs with failed units: counters ranking, Overview, Runs page."""

from __future__ import annotations

import pytest
from tests.index.test_index_cells import tracker  # noqa: F401 (fixture)
from tests.index.test_index_protocols import _run
from tests.leaderboard.test_leaderboard_views import open_page

from countboard.index import build_index


@pytest.fixture
def board(tracker, tmp_path):  # noqa: F811
    exp = tracker.experiment_id("countboard")
    ids = {"clean": _run(tracker, exp, cnt_p=0.4992),
           "official": _run(tracker, exp, cnt_p=0.4873, protocol={"task.mosaic": "official"}, params=True),
           "damaged": _run(tracker, exp, cnt_p=0.51, failed=1),
           "only_damaged": _run(tracker, exp, cnt_p=0.9, failed=6, model="m2")}
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    return ids, db


def _ranking(at):
    table = next(d.value for d in at.dataframe if "rank" in getattr(d.value, "columns", ()))
    return table.set_index("model")


def test_counters_rank_one_protocol_and_mark_failed_units(monkeypatch, board):
    ids, db = board
    at = open_page(monkeypatch, db, "views/counters.py", section="counters")
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="f_counters_protocol").value == "default"
    table = _ranking(at)
    assert table.loc["m1", "cnt_f1"] == pytest.approx(0.4992)  # not the later run with a failed unit
    assert table.loc["m2", "failed units"] == "6 (25.0%)" and table.loc["m1", "failed units"] == "—"
    at.selectbox(key="f_counters_protocol").set_value("mosaic=official").run()
    table = _ranking(at)
    assert list(table.index) == ["m1"] and table.loc["m1", "cnt_f1"] == pytest.approx(0.4873)
    at.selectbox(key="f_counters_protocol").set_value("All protocols, apart").run()
    table = _ranking(at)
    assert sorted(table.loc["m1", "protocol_label"]) == ["default", "mosaic=official"]
    at.selectbox(key="f_counters_protocol").set_value("default").run()
    at.toggle(key="f_counters_failed").set_value(True).run()
    assert sorted(_ranking(at).loc["m1", "failed units"]) == ["1 (4.2%)", "—"]  # the damaged run, apart


def test_overview_best_is_a_clean_run_and_runs_are_named_apart(monkeypatch, board):
    ids, db = board
    at = open_page(monkeypatch, db, "views/overview.py")
    text = " ".join(m.value for m in at.markdown)
    assert "Best: **m1**" in text and ids["only_damaged"] not in text  # m2's 0.9 has failed units
    at = open_page(monkeypatch, db, "views/runs.py")
    names = dict(zip(at.dataframe[0].value.run_id, at.dataframe[0].value.run_name, strict=True))
    assert names[ids["official"]] == "m1 · fsc147 · praco_mosaic · mosaic=official"
    assert names[ids["clean"]] == "m1 · fsc147 · praco_mosaic"
