"""Entries are model × dataset × split × task × protocol; a run with failed units never replaces a clean one."""

from __future__ import annotations

import time

import pytest
from tests.index.test_index_cells import _rows, tracker  # noqa: F401 (fixture)

from countboard.index import build_index
from countboard.protocol import derive
from countboard.tracking import store as st
from countboard.tracking import tags as tg

MOSAIC = "countboard.counting.tasks.praco.PracoMosaic"


def _run(tracker, exp, *, cnt_p, protocol=None, failed=0, model="m1", params=None, partial=False,  # noqa: F811
         n_units=24):
    """A finished praco_mosaic run; ``protocol``: the task params it was made with (tagged unless ``params``
    are given instead, as a run logged before protocols were tagged)."""
    task = {"task._target_": MOSAIC, "task.name": "praco_mosaic", "task.mosaic": "default", **(protocol or {})}
    tags = {"family": "counters", "model": model, "dataset": "fsc147", "task": "praco_mosaic", "split": "test",
            "config_hash": f"{model}-{sorted(task.items())}-{failed}-{partial}", "partial": str(partial).lower(),
            "n_units": str(n_units), "total_units": "24", "n_failed_units": str(failed), tg.ROLE: tg.ROLE_CELL}
    if params is None:
        proto = derive(task)
        tags.update({tg.PROTOCOL: proto.key, tg.PROTOCOL_LABEL: proto.label})
    run_id = tracker.create_run(exp, f"{model} · fsc147 · praco_mosaic", tags)
    if params is not None:
        tracker.log_params(run_id, task)
    tracker.log_metrics(run_id, {"cnt_precision": cnt_p, "cnt_f1": cnt_p, "n_samples": n_units - failed, "n_failed_samples": failed})
    tracker.set_status(run_id, st.FINISHED)
    time.sleep(0.01)  # distinct end times
    return run_id


def test_two_protocols_are_two_entries(tracker, tmp_path):  # noqa: F811
    exp = tracker.experiment_id("countboard")
    default = _run(tracker, exp, cnt_p=0.4992)
    official = _run(tracker, exp, cnt_p=0.4873, protocol={"task.mosaic": "official"})
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    latest = _rows(db, "SELECT run_id, protocol_label, cnt_precision FROM counters WHERE is_latest ORDER BY 2")
    assert latest.to_dict("records") == [
        {"run_id": default, "protocol_label": "default", "cnt_precision": 0.4992},
        {"run_id": official, "protocol_label": "mosaic=official", "cnt_precision": 0.4873}]


def test_runs_without_the_tag_get_the_protocol_their_params_give(tracker, tmp_path):  # noqa: F811
    exp = tracker.experiment_id("countboard")
    old = _run(tracker, exp, cnt_p=0.4873, protocol={"task.mosaic": "official", "task.n_figures": "2"}, params=True)
    new = _run(tracker, exp, cnt_p=0.48, protocol={"task.mosaic": "official"})  # same protocol, tagged, later
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    rows = _rows(db, "SELECT run_id, protocol, protocol_label, is_latest FROM counters ORDER BY end_time")
    assert rows["run_id"].tolist() == [old, new]
    assert rows["protocol"].nunique() == 1 and set(rows["protocol_label"]) == {"mosaic=official"}
    assert rows["is_latest"].tolist() == [False, True]  # one entry: the later run replaces the earlier


def test_a_run_with_failed_units_never_replaces_a_clean_run(tracker, tmp_path):  # noqa: F811
    exp = tracker.experiment_id("countboard")
    clean = _run(tracker, exp, cnt_p=0.4992)
    damaged = _run(tracker, exp, cnt_p=0.51, failed=1)  # later, 1 of 24 units unreadable
    only_damaged = _run(tracker, exp, cnt_p=0.3, failed=6, model="m2")
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    rows = _rows(db, "SELECT run_id, n_failed_units, failed_share, is_latest FROM counters").set_index("run_id")
    assert rows.loc[clean, "is_latest"] and not rows.loc[damaged, "is_latest"]
    assert rows.loc[damaged, "n_failed_units"] == 1 and rows.loc[damaged, "failed_share"] == pytest.approx(1 / 24)
    assert rows.loc[only_damaged, "is_latest"]  # no clean run of its entry: it stands, marked
    assert rows.loc[only_damaged, "failed_share"] == pytest.approx(6 / 24)
    assert rows.loc[clean, "n_failed_units"] == 0 and rows.loc[clean, "failed_share"] == 0
    cells = _rows(db, "SELECT model, n_failed_units, is_latest FROM counters_cells WHERE is_latest ORDER BY 1")
    assert cells[["model", "n_failed_units"]].to_dict("records") == [
        {"model": "m1", "n_failed_units": 0}, {"model": "m2", "n_failed_units": 6}]


def test_a_later_clean_run_takes_over_from_a_damaged_one(tracker, tmp_path):  # noqa: F811
    exp = tracker.experiment_id("countboard")
    _run(tracker, exp, cnt_p=0.51, failed=1)
    db = tmp_path / "index.duckdb"
    build_index(tracker.uri, db)
    assert _rows(db, "SELECT n_failed_units FROM counters WHERE is_latest")["n_failed_units"].tolist() == [1]
    clean = _run(tracker, exp, cnt_p=0.4992)
    build_index(tracker.uri, db)
    assert _rows(db, "SELECT run_id FROM counters WHERE is_latest")["run_id"].tolist() == [clean]
