"""A quick update of an SQLite store finds what was written since the last listing by the store's rowids, not by
any clock: runs written by a host whose clock is a day behind or ahead are indexed by the next quick update, a
quick update with nothing new writes nothing, and when the marked rows move (``mlflow gc``, ``VACUUM``) the update
compares every run instead."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from tests.fixtures.synthetic_store import local_store

from countboard.index import build_index
from countboard.index.reader import connect_readonly

DAY_MS = 24 * 3600 * 1000


def _ids(db) -> set[str]:
    con = connect_readonly(db)
    try:
        return {r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()}
    finally:
        con.close()


@pytest.fixture
def indexed(tmp_path):
    uri, root = local_store(tmp_path / "s")
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("e", artifact_location=f"{root}/e")
    first = _ended_run(client, exp, "first", int(time.time() * 1000))
    db = tmp_path / "index.duckdb"
    assert build_index(uri, db).rebuilt
    return uri, client, exp, db, first


def _ended_run(client, exp, model: str, at_ms: int) -> str:
    """A finished run stamped with ``at_ms`` throughout, as a host whose clock reads ``at_ms`` writes one."""
    rid = client.create_run(exp, tags={"family": "counters", "model": model}, start_time=at_ms).info.run_id
    client.log_batch(rid, metrics=[Metric("cnt_f1", 0.5, at_ms, 0)])
    client.set_terminated(rid, end_time=at_ms + 1000)
    return rid


@pytest.mark.parametrize("skew_ms", [-DAY_MS, DAY_MS], ids=["a_day_behind", "a_day_ahead"])
def test_a_run_from_a_skewed_clock_is_indexed_by_the_next_quick_update(indexed, skew_ms):
    uri, client, exp, db, first = indexed
    skewed = _ended_run(client, exp, "skewed", int(time.time() * 1000) + skew_ms)
    stats = build_index(uri, db, update="quick")
    assert (stats.mode, stats.added, stats.updated, stats.written) == ("quick", 1, 0, True)
    assert _ids(db) == {first, skewed}
    # a run of a correct clock after it is seen too (a clock ahead moves no watermark)
    after = _ended_run(client, exp, "after", int(time.time() * 1000))
    assert build_index(uri, db, update="quick").added == 1
    assert _ids(db) == {first, skewed, after}
    # nothing new: nothing read, nothing written
    idle = build_index(uri, db, update="quick")
    assert (idle.mode, idle.added, idle.updated, idle.removed, idle.written) == ("quick", 0, 0, 0, False)


def test_a_run_written_under_faketime_is_indexed_by_the_next_quick_update(indexed):
    """A real writer process whose clock is a day behind (``faketime``), not times set by hand."""
    faketime = shutil.which("faketime")
    if faketime is None:
        pytest.skip("faketime is not installed (apt-get install faketime)")
    uri, _client, exp, db, first = indexed
    code = ("import sys, time; from mlflow.tracking import MlflowClient; from mlflow.entities import Metric\n"
            "c = MlflowClient(tracking_uri=sys.argv[1]); now = int(time.time() * 1000)\n"
            "r = c.create_run(sys.argv[2], tags={'family': 'counters', 'model': 'behind'}).info.run_id\n"
            "c.log_batch(r, metrics=[Metric('cnt_f1', 0.25, now, 0)]); c.set_terminated(r)\n"
            "print(r, now)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([faketime, "-f", "-1d", sys.executable, "-c", code, uri, exp], env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout.split()
    rid, stamped = out[-2], int(out[-1])
    assert stamped < time.time() * 1000 - DAY_MS + 600_000  # the writer's clock was a day behind
    start_time = MlflowClient(tracking_uri=uri).get_run(rid).info.start_time
    assert start_time < time.time() * 1000 - DAY_MS + 600_000
    stats = build_index(uri, db, update="quick")
    assert (stats.mode, stats.added) == ("quick", 1)
    assert _ids(db) == {first, rid}


def test_moved_marks_make_the_update_a_scan(indexed, tmp_path):
    uri, client, exp, db, first = indexed
    last = _ended_run(client, exp, "last", int(time.time() * 1000) - DAY_MS)
    assert build_index(uri, db, update="quick").added == 1
    # the rows the index marked go for good (as `mlflow gc` removes them), a new run may take their rowids
    client.delete_run(last)
    con = sqlite3.connect(Path(tmp_path / "s" / "mlflow.db"))
    for table in ("metrics", "latest_metrics", "tags", "params", "runs"):
        con.execute(f"DELETE FROM {table} WHERE run_uuid = ?", (last,))
    con.commit()
    con.close()
    again = _ended_run(client, exp, "again", int(time.time() * 1000) - DAY_MS)
    stats = build_index(uri, db, update="quick")
    assert (stats.mode, stats.added, stats.removed) == ("scan", 1, 1)
    assert _ids(db) == {first, again}
    # the scan recorded marks that hold: the next update is quick again and finds nothing
    idle = build_index(uri, db, update="quick")
    assert (idle.mode, idle.written) == ("quick", False)


def test_an_index_without_marks_is_scanned_once_then_updated_quickly(indexed):
    uri, client, exp, db, first = indexed
    import duckdb

    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '' WHERE key = 'store_marks'")  # an index written before marks
    con.close()
    assert (s := build_index(uri, db, update="quick")).mode == "scan" and s.written
    late = _ended_run(client, exp, "late", int(time.time() * 1000) - DAY_MS)
    stats = build_index(uri, db, update="quick")
    assert (stats.mode, stats.added) == ("quick", 1)
    assert _ids(db) == {first, late}
