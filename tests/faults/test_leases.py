"""One owner per cell: concurrent sweeps of one grid, and signals that end only the runs a process owns."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from tests.faults.conftest import cell_runs, start_sweep

GRID = ["-m", "model=toy,toy_double", "task=toy,toy_b", "task.delay_s=0.15", "checkpoint_every=4"]


def _unit_counts(tmp_path) -> Counter:
    counts: Counter = Counter()
    for log in tmp_path.glob("calls-*.log"):
        cell = log.stem.removeprefix("calls-")
        counts.update(f"{cell}/{u}" for u in log.read_text().split())
    return counts


@pytest.mark.slow
def test_two_concurrent_sweeps_of_one_grid_compute_every_unit_once(tmp_path):
    args = GRID
    a = start_sweep(args, tmp_path, "a.log", TOY_CELL_LOG_DIR=str(tmp_path))
    b = start_sweep(args, tmp_path, "b.log", TOY_CELL_LOG_DIR=str(tmp_path))
    assert a.wait(timeout=300) == 0, (tmp_path / "a.log").read_text()[-3000:]
    assert b.wait(timeout=300) == 0, (tmp_path / "b.log").read_text()[-3000:]
    out = (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()
    assert "busy toy" in out  # the two processes did meet on a cell
    cells = cell_runs(tmp_path / "mlruns")
    assert len(cells) == 4 and set(cells["status"]) == {"FINISHED"}
    assert cells["tags.config_hash"].nunique() == 4
    counts = _unit_counts(tmp_path)
    assert len(counts) == 4 * 12 and set(counts.values()) == {1}, counts.most_common(3)


@pytest.mark.slow
def test_sigterm_ends_only_the_runs_of_the_stopped_process(tmp_path):
    args = GRID
    a = start_sweep(args, tmp_path, "a.log", TOY_CELL_LOG_DIR=str(tmp_path))
    b = start_sweep(args, tmp_path, "b.log", TOY_CELL_LOG_DIR=str(tmp_path))
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("calls-*.log"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # both are computing a cell of their own
    a.send_signal(signal.SIGTERM)
    assert a.wait(timeout=120) != 0
    assert b.wait(timeout=300) == 0, (tmp_path / "b.log").read_text()[-3000:]
    cells = cell_runs(tmp_path / "mlruns")
    owners_b = cells[cells["tags.owner"].str.endswith(f":{b.pid}")]
    assert len(owners_b) >= 1 and set(owners_b["status"]) == {"FINISHED"}
    assert set(cells["status"]) <= {"FINISHED", "KILLED"}
    assert not ((cells["status"] == "KILLED") & cells["tags.owner"].str.endswith(f":{b.pid}")).any()

    rerun = start_sweep(args, tmp_path, "c.log", TOY_CELL_LOG_DIR=str(tmp_path))
    assert rerun.wait(timeout=300) == 0, (tmp_path / "c.log").read_text()[-3000:]
    cells = cell_runs(tmp_path / "mlruns")
    assert len(cells) == 4 and set(cells["status"]) == {"FINISHED"}
    counts = _unit_counts(tmp_path)
    assert len(counts) == 48  # every unit present; at most the chunk in progress at SIGTERM ran twice
    assert sum(v - 1 for v in counts.values()) <= 4


@pytest.mark.slow
def test_on_busy_wait_waits_for_the_owner_then_skips_the_finished_cell(tmp_path):
    args = ["task.delay_s=1.5", "checkpoint_every=4"]  # A needs 18 s: B starts while A computes
    a = start_sweep(args, tmp_path, "a.log", TOY_CELL_LOG_DIR=str(tmp_path))
    log = tmp_path / "calls-1.0-toy.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.2)  # A owns the cell once it computes
    b = start_sweep([*args, "on_busy=wait"], tmp_path, "b.log", TOY_CELL_LOG_DIR=str(tmp_path))
    assert a.wait(timeout=300) == 0 and b.wait(timeout=300) == 0
    out_b = (tmp_path / "b.log").read_text()
    assert "wait toy · toy · toy · delay_s=1.5: owned by" in out_b and "skip toy · toy · toy · delay_s=1.5" in out_b
    assert len(cell_runs(tmp_path / "mlruns")) == 1
    assert sorted(log.read_text().split()) == [f"u{i:03d}" for i in range(12)]


@pytest.mark.slow
def test_two_concurrent_sweeps_on_a_remote_mlflow_server(tmp_path, mlflow_server_url):
    import mlflow

    a = start_sweep(GRID, tmp_path, "a.log", server=mlflow_server_url, TOY_CELL_LOG_DIR=str(tmp_path))
    b = start_sweep(GRID, tmp_path, "b.log", server=mlflow_server_url, TOY_CELL_LOG_DIR=str(tmp_path))
    assert a.wait(timeout=600) == 0, (tmp_path / "a.log").read_text()[-3000:]
    assert b.wait(timeout=600) == 0, (tmp_path / "b.log").read_text()[-3000:]
    client = mlflow.MlflowClient(mlflow_server_url)
    exp = client.get_experiment_by_name("countboard/engine")  # the toy family's experiment
    cells = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("countboard.role") == "cell"]
    assert len(cells) == 4 and {r.info.status for r in cells} == {"FINISHED"}
    counts = _unit_counts(tmp_path)
    assert len(counts) == 48 and set(counts.values()) == {1}, counts.most_common(3)
