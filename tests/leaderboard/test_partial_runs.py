"""Smoke runs never change the leaderboard's values (asked for, they stand apart); seeds of a cell rank as their mean."""

from __future__ import annotations

import pytest
from tests.index.test_index_cells import _run, tracker  # noqa: F401 (fixture)

import queries
from countboard.index import build_index
from countboard.index.reader import connect_readonly

KEYS = ["mae", "cnt_f1"]


def _ranking(db, **kw):
    con = connect_readonly(db)
    try:
        return con.execute(queries.ranking("counters", "mae", False, True, None, KEYS, **kw),
                           [None, None, None, None]).df()
    finally:
        con.close()


def test_smoke_run_changes_no_ranked_value_and_shows_apart_when_asked(tracker, tmp_path):  # noqa: F811
    exp = tracker.experiment_id("countboard")
    _run(tracker, exp, mae=1.62)
    _run(tracker, exp, mae=2.5, model="m2", replicate="cellB")
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    before = _ranking(db)
    _run(tracker, exp, mae=0.433, partial=True)  # max_samples=5 of m1's cell, later than its full run
    build_index(tracker.uri, db)
    after = _ranking(db)
    assert after[["model", "mae"]].to_dict("records") == before[["model", "mae"]].to_dict("records")
    assert after["mae"].tolist() == pytest.approx([1.62, 2.5])
    asked = _ranking(db, include_partial=True)
    rows = {(r.model, bool(r.partial)): r.mae for r in asked.itertuples()}
    assert rows == pytest.approx({("m1", False): 1.62, ("m1", True): 0.433, ("m2", False): 2.5})


def test_seeds_of_a_cell_rank_as_their_mean_with_spread_and_count(tracker, tmp_path):  # noqa: F811
    exp = tracker.experiment_id("countboard")
    for seed, mae in enumerate([1.0, 2.0, 4.0]):
        _run(tracker, exp, mae=mae, seed=seed)
    _run(tracker, exp, mae=2.0, model="m2", replicate="cellB")
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    ranked = _ranking(db, seeds=True).set_index("model")
    assert ranked.index.tolist() == ["m2", "m1"]  # 2.0 beats the mean 7/3, whatever seed came last
    assert ranked.loc["m1", "mae"] == pytest.approx(7 / 3)
    sd = (((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2) ** 0.5
    assert ranked.loc["m1", "mae__std"] == pytest.approx(sd)
    assert ranked.loc["m1", "n_runs"] == 3 and ranked.loc["m2", "n_runs"] == 1
