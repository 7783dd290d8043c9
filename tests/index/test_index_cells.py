"""Smoke runs and seeds in the index views: a partial run never replaces a full one; seeds aggregate."""

from __future__ import annotations

import time

import pytest
from omegaconf import OmegaConf

from countboard.index import build_index
from countboard.index.reader import connect_readonly
from countboard.tracking import store as st
from countboard.tracking import tags as tg
from countboard.tracking import tracker_from_config


def _run(tracker, exp, *, mae, seed=0, partial=False, replicate="cellA", model="m1"):
    tags = {"family": "counters", "model": model, "dataset": "fsc147", "task": "praco_negative", "split": "test",
            "config_hash": f"{replicate}-{seed}-{partial}", "replicate_hash": f"{replicate}-{partial}",
            "seed": str(seed), "partial": str(partial).lower(), "n_units": "5" if partial else "100",
            "total_units": "100", tg.ROLE: "cell"}
    run_id = tracker.create_run(exp, f"{model} · fsc147 · praco_negative", tags)
    tracker.log_metrics(run_id, {"mae": mae, "cnt_f1": 1 - mae / 10})
    tracker.set_status(run_id, st.FINISHED)
    time.sleep(0.01)  # distinct end times
    return run_id


def _rows(db, sql):
    con = connect_readonly(db)
    try:
        return con.execute(sql).df()
    finally:
        con.close()


@pytest.fixture
def tracker(tmp_path):
    t = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(tmp_path / "mlruns")}))
    t.check()
    return t


def test_a_smoke_run_leaves_the_leaderboard_values_unchanged(tracker, tmp_path):
    exp = tracker.experiment_id("countboard")
    full = _run(tracker, exp, mae=1.62)
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    before = _rows(db, "SELECT run_id, mae FROM counters WHERE is_latest")
    _run(tracker, exp, mae=0.433, partial=True)  # max_samples=5, later than the full run
    build_index(tracker.uri, db)
    after = _rows(db, "SELECT run_id, mae FROM counters WHERE is_latest")
    assert before.to_dict("records") == after.to_dict("records") == [{"run_id": full, "mae": 1.62}]
    cells = _rows(db, "SELECT mae, partial, n_units, is_latest FROM counters_cells ORDER BY partial")
    assert cells["partial"].tolist() == [False, True] and cells["is_latest"].tolist() == [True, False]
    assert cells["mae"].tolist() == pytest.approx([1.62, 0.433])
    assert _rows(db, "SELECT count(*) AS n FROM counters WHERE partial")["n"].iloc[0] == 1  # asked for: there


def test_seeds_of_one_cell_aggregate_instead_of_replacing_each_other(tracker, tmp_path):
    exp = tracker.experiment_id("countboard")
    values = [1.0, 2.0, 4.0]
    for seed, mae in enumerate(values):
        _run(tracker, exp, mae=mae, seed=seed)
    _run(tracker, exp, mae=9.0, model="m2", replicate="cellB")
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    cell = _rows(db, "SELECT * FROM counters_cells WHERE model = 'm1'").iloc[0]
    mean = sum(values) / 3
    sd = (sum((v - mean) ** 2 for v in values) / 2) ** 0.5
    assert cell["n_runs"] == 3 and cell["is_latest"]
    assert cell["mae"] == pytest.approx(mean) and cell["mae__std"] == pytest.approx(sd)
    single = _rows(db, "SELECT n_runs, mae__std FROM counters_cells WHERE model = 'm2'").iloc[0]
    assert single["n_runs"] == 1 and single["mae__std"] != single["mae__std"]  # NaN: no spread from one seed
    assert _rows(db, "SELECT count(*) AS n FROM counters WHERE model = 'm1'")["n"].iloc[0] == 3
