"""A cell writing straight to an MLflow store on PostgreSQL whose database server is killed in the middle of the
cell: each cell says so in one line naming the store (password hidden) and what to do, no traceback; the
checkpoints already stored are kept, and after the server is started again the rerun resumes from them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_sweep, sweep_env
from tests.faults.test_store_lost import GRID, POINTS
from tests.integration import services

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def postgres():
    try:
        pg = services.start_postgres()
    except services.Unavailable as exc:
        pytest.skip(f"service unavailable: {exc}")
    yield pg
    pg.stop()


def _restart(pg: services.Postgres) -> None:
    """Start the killed server again on its data folder and port (it recovers from its WAL), then wait for it."""
    for proc in pg.procs:
        proc.wait(timeout=30)
    pg.procs.clear()
    bins = services.ensure(services.POSTGRES)
    user = "postgres" if os.geteuid() == 0 else None
    postgres = str(Path(bins["initdb"]).with_name("postgres"))
    pg.start([postgres, "-D", str(pg.root / "data"), "-p", str(pg.port), "-k", str(pg.root), "-c",
              "listen_addresses=127.0.0.1", "-c", "fsync=off"], pg.root / "postgres.log", user=user)
    psql = [bins["psql"], "-h", str(pg.root), "-p", str(pg.port), "-U", "postgres", "-c", "SELECT 1"]
    services.wait_for(lambda: subprocess.run(psql, user=user, capture_output=True, timeout=30).returncode == 0,
                      "PostgreSQL", 60, pg.root / "postgres.log")


def _cells(uri: str):
    import mlflow

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(search_all_experiments=True)
    return runs[runs["tags.countboard.role"] == "cell"]


@pytest.mark.parametrize("point", ["checkpoint_write", "cell_metrics"])
def test_a_database_server_killed_during_a_cell_is_one_line_per_cell_and_the_rerun_resumes(tmp_path, postgres,
                                                                                             point):
    args = [*GRID, "tracking=server", f"tracking.uri={postgres.uri}",
            f"tracking.artifact_root={(tmp_path / 'artifacts').as_uri()}"]
    calls = tmp_path / "calls"
    calls.mkdir()
    env = sweep_env(tmp_path, COUNTBOARD_FAILPOINT=point, COUNTBOARD_FAILPOINT_KILL=str(postgres.procs[0].pid),
                    TOY_CELL_LOG_DIR=str(calls))
    first = run_sweep(args, tmp_path, check=False, env=env, timeout=600)
    lines = first.stderr.strip().splitlines()
    assert first.returncode == 1 and "Traceback" not in first.stderr, first.stderr[-3000:]
    assert "mlflow-test-pw" not in first.stderr  # the password is never shown
    assert len(lines) == 2 and all(line.startswith("error: job #") for line in lines), first.stderr
    shown = postgres.uri.replace("mlflow-test-pw", "***")
    assert f"the database server of the MLflow store {shown} stopped answering during cell" in lines[0], lines[0]
    assert POINTS[point] in lines[0] and "start the database server again" in lines[0], lines[0]
    assert lines[0].endswith("the rerun resumes from them"), lines[0]
    assert "cannot reach the database server of the MLflow store" in lines[1], lines[1]  # the next cell, at once
    computed_first = (calls / "calls-1-toy.log").read_text().split()

    _restart(postgres)
    cells = _cells(postgres.uri)
    assert len(cells) == 1 and cells["status"].iloc[0] != "FINISHED"  # the killed cell's run, kept to resume
    run_sweep(args, tmp_path, env=sweep_env(tmp_path, TOY_CELL_LOG_DIR=str(calls)), timeout=600)
    cells = _cells(postgres.uri)
    assert len(cells) == 2 and set(cells["status"]) == {"FINISHED"}, cells[["status"]]
    computed = (calls / "calls-1-toy.log").read_text().split()
    if point == "cell_metrics":  # every unit was checkpointed: none is computed again
        assert computed == computed_first and len(computed) == 12
    else:  # at most the chunk whose part never reached the store is computed again
        assert len(computed) - 12 <= 4
