"""The index against the store it was built from: contents, incremental updates, deletions, rebuilds."""

from __future__ import annotations

import shutil

import duckdb
import numpy as np
import pandas as pd
import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from countboard.index import build_index, ddl
from countboard.index.reader import connect_readonly


def _q(db, sql, params=None) -> pd.DataFrame:
    con = connect_readonly(db)
    try:
        return con.execute(sql, params or []).df()
    finally:
        con.close()


@pytest.fixture
def store(small_store, tmp_path):
    """A private copy of the module's store, so tests may change it."""
    shutil.copytree(small_store.store_dir, tmp_path / "s")
    old = str(small_store.store_dir)
    uri = small_store.uri.replace(old, str(tmp_path / "s"))
    con = __import__("sqlite3").connect(tmp_path / "s" / "mlflow.db")
    con.execute("UPDATE experiments SET artifact_location = replace(artifact_location, ?, ?)", (old, str(tmp_path / "s")))
    con.execute("UPDATE runs SET artifact_uri = replace(artifact_uri, ?, ?)", (old, str(tmp_path / "s")))
    con.commit()
    con.close()
    return small_store, uri, tmp_path / "s" / "index.duckdb"


def test_tables_match_the_store(store):
    s, uri, db = store
    stats = build_index(uri, db)
    assert stats.rebuilt and stats.written
    client = MlflowClient(tracking_uri=uri)
    assert stats.runs == len(s.run_ids) + len(s.sweep_run_ids)
    runs = _q(db, "SELECT * FROM runs")
    assert set(runs.run_id) == set(s.run_ids) | set(s.sweep_run_ids)
    assert runs.set_index("run_id").loc[s.sweep_run_ids, "is_sweep"].all()
    for run_id in s.run_ids[:3]:
        run = client.get_run(run_id)
        tags = _q(db, "SELECT key, value FROM tags WHERE run_id = ?", [run_id])
        assert dict(zip(tags.key, tags.value, strict=True)) == run.data.tags
        params = _q(db, "SELECT key, value FROM params WHERE run_id = ?", [run_id])
        assert dict(zip(params.key, params.value, strict=True)) == run.data.params
        latest = _q(db, "SELECT key, value FROM metrics WHERE run_id = ?", [run_id])
        assert dict(zip(latest.key, latest.value, strict=True)) == pytest.approx(run.data.metrics)
        hist = _q(db, "SELECT key, step, value FROM metric_history WHERE run_id = ? ORDER BY key, step", [run_id])
        expected = sorted((k, m.step, m.value) for k in run.data.metrics for m in client.get_metric_history(run_id, k))
        assert [tuple(r) for r in hist.itertuples(index=False)] == expected
        arts = _q(db, "SELECT path FROM artifacts WHERE run_id = ? AND NOT is_dir ORDER BY path", [run_id])
        listed = sorted(f.path for d in [None, *[a.path for a in client.list_artifacts(run_id) if a.is_dir]]
                        for f in client.list_artifacts(run_id, d) if not f.is_dir)
        assert list(arts.path) == listed


def test_family_view_has_one_column_per_metric(store):
    s, uri, db = store
    build_index(uri, db)
    view = _q(db, "SELECT * FROM counters").set_index("run_id").sort_index()
    expected = s.values[s.values.family == "counters"].set_index("run_id").sort_index()
    assert list(view.index) == list(expected.index)
    for key in ("cnt_f1", "mae", "n_samples"):
        np.testing.assert_allclose(view[key].to_numpy(), expected[key].to_numpy())
    assert set(_q(db, "SELECT model FROM grounding").model) == {"vlm_a", "vlm_b"}


def test_second_call_changes_nothing(store):
    s, uri, db = store
    build_index(uri, db)
    before = db.stat().st_mtime_ns
    stats = build_index(uri, db)
    assert not stats.written and stats.added == stats.updated == stats.removed == 0
    assert db.stat().st_mtime_ns == before


def test_incremental_update_reads_only_changed_runs(store):
    s, uri, db = store
    build_index(uri, db)
    client = MlflowClient(tracking_uri=uri)
    changed = s.run_ids[0]
    client.log_batch(changed, metrics=[Metric("cnt_f1", 0.123, 10**13, 5)])
    new = client.create_run(s.experiment_id, tags={"family": "counters", "model": "delta", "dataset": "carpk"})
    client.log_batch(new.info.run_id, metrics=[Metric("cnt_f1", 0.5, 10**13, 0)])
    client.set_terminated(new.info.run_id)
    stats = build_index(uri, db, update="scan")
    assert (stats.added, stats.updated, stats.removed) == (1, 1, 0)
    assert stats.histories_fetched == 1  # the moved, stepped cnt_f1; the new run's step-0 metric is its latest
    new_hist = _q(db, "SELECT key, step, value FROM metric_history WHERE run_id = ?", [new.info.run_id])
    assert [tuple(r) for r in new_hist.itertuples(index=False)] == [("cnt_f1", 0, 0.5)]
    hist = _q(db, "SELECT step, value FROM metric_history WHERE run_id = ? AND key = 'cnt_f1' ORDER BY step",
              [changed])
    assert list(hist.step) == [0, 1, 5] and hist.value.iloc[-1] == pytest.approx(0.123)
    row = _q(db, "SELECT cnt_f1 FROM counters WHERE run_id = ?", [changed])
    assert row.cnt_f1.iloc[0] == pytest.approx(0.123)
    assert _q(db, "SELECT count(*) AS n FROM counters WHERE model = 'delta'").n.iloc[0] == 1


def test_deleted_runs_and_experiments_leave_the_index(store):
    s, uri, db = store
    build_index(uri, db)
    client = MlflowClient(tracking_uri=uri)
    client.delete_run(s.run_ids[1])
    stats = build_index(uri, db)
    assert stats.removed == 1
    for table in ddl.PER_RUN_TABLES:
        assert _q(db, f"SELECT count(*) AS n FROM {table} WHERE run_id = ?", [s.run_ids[1]]).n.iloc[0] == 0
    client.delete_experiment(s.experiment_id)
    stats = build_index(uri, db)
    assert stats.runs == 0 and _q(db, "SELECT count(*) AS n FROM runs").n.iloc[0] == 0


def test_running_runs_stay_out_of_family_views(store):
    s, uri, db = store
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(s.experiment_id, tags={"family": "counters", "model": "busy"})
    client.log_batch(run.info.run_id, metrics=[Metric("cnt_f1", 0.99, 10**13, 0)])
    build_index(uri, db)
    assert _q(db, "SELECT status FROM runs WHERE run_id = ?", [run.info.run_id]).status.iloc[0] == "RUNNING"
    assert _q(db, "SELECT count(*) AS n FROM counters WHERE model = 'busy'").n.iloc[0] == 0
    client.set_terminated(run.info.run_id)
    stats = build_index(uri, db)
    assert stats.updated >= 1
    assert _q(db, "SELECT count(*) AS n FROM counters WHERE model = 'busy'").n.iloc[0] == 1


def test_comparison_runs_are_aggregates_not_ranking_entries(store):
    s, uri, db = store
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(s.experiment_id, tags={"family": "counters", "countboard.role": "comparison"})
    client.set_terminated(run.info.run_id)
    build_index(uri, db)
    assert _q(db, "SELECT is_sweep FROM runs WHERE run_id = ?", [run.info.run_id]).is_sweep.iloc[0]
    assert _q(db, "SELECT count(*) AS n FROM counters WHERE run_id = ?", [run.info.run_id]).n.iloc[0] == 0


def test_other_schema_version_is_rebuilt(store):
    s, uri, db = store
    build_index(uri, db)
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.execute("DELETE FROM params")
    con.close()
    stats = build_index(uri, db)
    assert stats.rebuilt
    assert _q(db, "SELECT value FROM meta WHERE key = 'schema_version'").value.iloc[0] == str(ddl.SCHEMA_VERSION)
    assert _q(db, "SELECT count(*) AS n FROM params").n.iloc[0] > 0


def test_readers_keep_a_consistent_snapshot(store):
    s, uri, db = store
    build_index(uri, db)
    reader = connect_readonly(db)  # a leaderboard holding the index open
    n_before = reader.execute("SELECT count(*) FROM runs").fetchone()[0]
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(s.experiment_id, tags={"family": "counters", "model": "late"})
    client.set_terminated(run.info.run_id)
    stats = build_index(uri, db)  # must not be blocked by the reader's lock
    assert stats.added == 1
    assert reader.execute("SELECT count(*) FROM runs").fetchone()[0] == n_before
    assert _q(db, "SELECT count(*) AS n FROM runs").n.iloc[0] == n_before + 1  # while the reader is open
    reader.close()


def test_index_command_builds_then_reports_unchanged(store, capsys):
    from countboard.cli import main

    s, uri, db = store
    assert main(["index", "--store", uri, "--db", str(db)]) == 0
    assert f"{len(s.run_ids) + len(s.sweep_run_ids)} runs" in capsys.readouterr().out
    assert main(["index", "--store", uri, "--db", str(db)]) == 0
    assert "index unchanged" in capsys.readouterr().out


def test_history_all_reads_repeated_step_zero_values(store):
    s, uri, db = store
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(s.experiment_id, tags={"family": "counters", "model": "twice"})
    client.log_metric(run.info.run_id, "mae", 2.0, timestamp=1000, step=0)
    client.log_metric(run.info.run_id, "mae", 1.0, timestamp=2000, step=0)
    assert len(client.get_metric_history(run.info.run_id, "mae")) == 2
    client.set_terminated(run.info.run_id)
    sql = "SELECT value FROM metric_history WHERE run_id = ? ORDER BY timestamp"
    build_index(uri, db, history="stepped")
    assert list(_q(db, sql, [run.info.run_id]).value) == [1.0]
    build_index(uri, db, full=True, history="all")
    assert list(_q(db, sql, [run.info.run_id]).value) == [2.0, 1.0]


def test_quick_update_sees_new_ended_running_and_deleted_runs(store):
    s, uri, db = store
    build_index(uri, db)
    client = MlflowClient(tracking_uri=uri)
    running = client.create_run(s.experiment_id, tags={"family": "counters", "model": "slow"})
    assert build_index(uri, db, update="quick").added == 1
    client.log_batch(running.info.run_id, metrics=[Metric("cnt_f1", 0.7, 10**13, 0)])
    client.set_terminated(running.info.run_id)
    client.delete_run(s.run_ids[2])
    stats = build_index(uri, db, update="quick")
    assert (stats.added, stats.updated, stats.removed) == (0, 1, 1)
    assert _q(db, "SELECT cnt_f1 FROM counters WHERE model = 'slow'").cnt_f1.iloc[0] == pytest.approx(0.7)
    assert _q(db, "SELECT count(*) AS n FROM runs WHERE run_id = ?", [s.run_ids[2]]).n.iloc[0] == 0
    full = build_index(uri, db)
    assert (full.added, full.updated, full.removed, full.written) == (0, 0, 0, False)


def test_default_update_is_quick_between_scans_and_scans_when_one_is_due(tmp_path, capsys):
    from tests.fixtures.synthetic_store import local_store

    from countboard.cli import main
    from countboard.index.builder import CLOCK_SKEW_MS

    uri, root = local_store(tmp_path / "s")
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("e", artifact_location=f"{root}/e")
    long_ago = int(__import__("time").time() * 1000) - 3 * CLOCK_SKEW_MS
    old = client.create_run(exp, tags={"family": "counters", "model": "m"}, start_time=long_ago).info.run_id
    client.log_batch(old, metrics=[Metric("cnt_f1", 0.4, long_ago, 0)])
    client.set_terminated(old, end_time=long_ago + 1000)
    db = tmp_path / "index.duckdb"
    assert build_index(uri, db).rebuilt  # a rebuild is a scan
    # a metric logged into a long-ended run: a row written since the last listing, seen by a quick update
    client.log_batch(old, metrics=[Metric("cnt_f1", 0.9, long_ago + 2000, 1)])
    quick = build_index(uri, db)
    assert (quick.mode, quick.updated, quick.written) == ("quick", 1, True)
    assert _q(db, "SELECT cnt_f1 FROM counters").cnt_f1.iloc[0] == pytest.approx(0.9)
    # an edit in place (a param's value rewritten in the table) writes no new row: not seen between scans
    con = __import__("sqlite3").connect(tmp_path / "s" / "mlflow.db")
    con.execute("INSERT INTO params (key, value, run_uuid) VALUES ('lr', '0.1', ?)", (old,))
    con.commit()
    assert build_index(uri, db).updated == 1
    con.execute("UPDATE params SET value = '0.2' WHERE run_uuid = ? AND key = 'lr'", (old,))
    con.commit()
    con.close()
    quick = build_index(uri, db)
    assert (quick.mode, quick.updated, quick.written) == ("quick", 0, False)
    due = build_index(uri, db, scan_every_s=0)
    assert (due.mode, due.updated) == ("scan", 1)
    assert _q(db, "SELECT value FROM params WHERE key = 'lr'").value.iloc[0] == "0.2"
    assert build_index(uri, db).mode == "quick"  # the scan just ran
    # a writer whose clock is far behind: runs stamped long ago, one still running and one ended now, are found
    behind = client.create_run(exp, tags={"family": "counters", "model": "b"}, start_time=long_ago).info.run_id
    ended = client.create_run(exp, tags={"family": "counters", "model": "e"}, start_time=long_ago).info.run_id
    client.set_terminated(ended)
    seen = build_index(uri, db)
    assert (seen.mode, seen.added) == ("quick", 2)
    assert set(_q(db, "SELECT run_id FROM runs").run_id) == {old, behind, ended}
    client.set_tag(old, "note", "checked")
    assert main(["index", "--store", uri, "--db", str(db), "--scan"]) == 0
    # the tag edit, and the running run (read at every update)
    assert "index updated (scan): 3 runs (0 added, 2 updated" in capsys.readouterr().out
    client.set_tag(old, "note", "checked twice")
    assert main(["index", "--store", uri, "--db", str(db), "--scan-every", "0"]) == 0
    assert "index updated (scan)" in capsys.readouterr().out
    (tmp_path / "index.duckdb.scanned").write_text("not json")  # unreadable: a scan is due
    assert build_index(uri, db).mode == "scan"
