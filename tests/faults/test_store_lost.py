"""The tracking server dies at each step a job asks of it (the run's start, a checkpoint, the artifacts, the
metrics, the run's end): each cell says so in one line, no traceback, and after a restart the rerun resumes from
the checkpoints with the metrics of a clean run."""

from __future__ import annotations

import pytest

from tests.conftest import run_sweep, store_runs, sweep_env
from tests.faults.conftest import TOY
from tests.fixtures.mlflow_process import MlflowServerProcess

GRID = ["-m", *TOY, "model.scale=1,2", "checkpoint_every=4"]
POINTS = {"cell_start": "starting its run", "checkpoint_write": "writing a checkpoint",
          "cell_artifacts": "logging its artifacts", "cell_metrics": "logging its metrics",
          "cell_end": "ending its run"}


def _metrics(runs) -> dict[str, dict[str, float]]:
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert (cells["status"] == "FINISHED").all(), cells[["status"]]
    keep = [c for c in cells.columns if c.startswith("metrics.") and c != "metrics.duration_s"]
    return {row["params.model.scale"]: {k: row[k] for k in keep if row[k] == row[k]} for _, row in cells.iterrows()}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, dict[str, float]]:
    tmp = tmp_path_factory.mktemp("clean")
    run_sweep(GRID, tmp, store=tmp / "store")
    return _metrics(store_runs(tmp / "store"))


def _server_runs(url: str):
    import mlflow

    mlflow.set_tracking_uri(url)
    return mlflow.search_runs(search_all_experiments=True)


@pytest.mark.slow
@pytest.mark.parametrize("point", list(POINTS))
def test_a_server_killed_during_a_cell_is_one_line_per_cell_and_the_rerun_resumes(tmp_path, point, clean):
    server = MlflowServerProcess(tmp_path / "server").start()
    try:
        args = [*GRID, "tracking=server", f"tracking.uri={server.url}"]
        calls = tmp_path / "calls"
        calls.mkdir()
        env = sweep_env(tmp_path, COUNTBOARD_FAILPOINT=point, COUNTBOARD_FAILPOINT_KILL=str(server.pgid),
                        TOY_CELL_LOG_DIR=str(calls))
        first = run_sweep(args, tmp_path, check=False, env=env)
        lines = first.stderr.strip().splitlines()
        assert first.returncode == 1 and "Traceback" not in first.stderr, first.stderr[-3000:]
        assert len(lines) == 2 and all(line.startswith("error: job #") for line in lines), first.stderr
        assert f"the MLflow server at {server.url} stopped answering during cell" in lines[0]
        assert POINTS[point] in lines[0] and "start the server again" in lines[0]
        assert lines[0].endswith("the rerun resumes from them") or lines[0].endswith("computed yet")
        assert f"cannot reach the MLflow server at {server.url}" in lines[1]  # the next cell, before it starts
        computed_first = (calls / "calls-1-toy.log").read_text().split() if point != "cell_start" else []

        server.kill()  # reaped, then started again on the same port, database and artifacts
        server.start()
        run_sweep(args, tmp_path, env=sweep_env(tmp_path, TOY_CELL_LOG_DIR=str(calls)))
        assert _metrics(_server_runs(server.url)) == clean
        computed = (calls / "calls-1-toy.log").read_text().split()
        if point in ("cell_artifacts", "cell_metrics", "cell_end"):  # every unit was checkpointed: none again
            assert computed == computed_first and len(computed) == 12
        else:  # at most the chunk whose part never reached the store is computed again
            assert len(computed) - 12 <= 4
    finally:
        server.kill()
