"""Sweeps through ``hydra/launcher=slurm_cpu`` on a real single-node SLURM cluster (munge, slurmctld, slurmd,
slurmdbd + MariaDB), into a local store and into the MLflow server; a cancelled job is reported and resumed, with
and without accounting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FIXTURES, store_runs, sweep_env

pytestmark = pytest.mark.integration
TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config"]
# the presets as they are, polled fast enough for a test
SLURM = ["hydra/launcher=slurm_cpu", "hydra.launcher.poll_s=1"]


def sweep_cmd(args: list[str], store: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *TOY, "-m", *SLURM, *args, "progress=false"]
    return cmd + ([f"tracking.store_dir={store}"] if store else [])


def run(cmd, tmp_path, env, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)


def server_runs(url: str, experiment: str) -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(url)
    return mlflow.search_runs(experiment_names=[experiment])


def _check_grid(runs: pd.DataFrame) -> None:
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 4 and set(cells.status) == {"FINISHED"}
    assert set(runs[runs["tags.countboard.role"] == "sweep"].status) == {"FINISHED"}
    assert sorted(cells["metrics.mae"]) == pytest.approx([0, 0, 5.5, 5.5])


def test_grid_through_slurm_into_a_local_store_and_into_the_server(slurm, mlflow_server, tmp_path):
    env = sweep_env(tmp_path, **{"SLURM_CONF": str(slurm.conf)})
    grid = ["model=toy,toy_double", "task=toy,toy_b"]
    proc = run(sweep_cmd(grid, tmp_path / "mlruns"), tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_grid(store_runs(tmp_path / "mlruns"))

    def completed_with_one_cpu() -> int:  # array tasks with the preset's 1 CPU
        jobs = slurm.cmd("sacct", "-X", "-n", "-P", "-o", "JobID,State,AllocCPUS").stdout.split()
        return len([j for j in jobs if j.endswith("|COMPLETED|1")])

    # slurmdbd records ended jobs asynchronously: the last tasks may reach sacct a little after the sweep returns
    _wait(lambda: completed_with_one_cpu() >= 4, "4 COMPLETED 1-CPU array tasks in sacct", timeout=60)

    proc = run(sweep_cmd([*grid, "tracking=server", f"tracking.uri={mlflow_server.url}",
                          "tracking.experiment=slurm_grid"], None), tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_grid(server_runs(mlflow_server.url, "slurm_grid"))


def _wait(predicate, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("accounting", [True, False], ids=["sacct", "no-accounting"])
def test_scancel_is_reported_and_the_rerun_resumes(slurm, tmp_path, accounting):
    env = sweep_env(tmp_path, SLURM_CONF=str(slurm.conf))
    if not accounting:  # sacct as on a cluster without slurmdbd: the launcher must notice through squeue
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\n"
                                    "exit 1\n")
        (fake / "sacct").chmod(0o755)
        env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    calls = tmp_path / "calls.log"
    args = ["model=toy", f"task.calls_log={calls}", "task.delay_s=1.0", "checkpoint_every=2",
            "hydra.launcher.lost_after_s=5"]
    store = tmp_path / "mlruns"
    sweep = subprocess.Popen(sweep_cmd(args, store), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, cwd=tmp_path)
    try:
        _wait(lambda: calls.exists() and len(calls.read_text().split()) >= 5, "the job to compute 5 units")
        queued = slurm.cmd("squeue", "-h", "-o", "%i").stdout.split()
        assert len(queued) == 1
        slurm.cmd("scancel", queued[0])
        out, _ = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode != 0
    assert "1 of 1 SLURM jobs ended without a result" in out and queued[0].split("_")[0] in out
    # with accounting submitit reads the state from sacct; without, the job is found gone from squeue
    assert ("CANCELLED" in out) if accounting else ("left the queue without a result" in out), out[-3000:]
    runs = store_runs(store)
    parent = runs[runs["tags.countboard.role"] == "sweep"].iloc[0]
    cell = runs[runs["tags.countboard.role"] == "cell"].iloc[0]
    assert parent.status == "FAILED" and "SLURM jobs ended without a result" in parent["tags.error"]
    assert cell.status == "KILLED"  # scancel sends SIGTERM first: the job ends the run it owns
    done_before = len(calls.read_text().split())
    assert done_before < 12

    proc = run(sweep_cmd(args, store), tmp_path, env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = store_runs(store)
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 1 and cells.run_id.iloc[0] == cell.run_id and cells.status.iloc[0] == "FINISHED"
    assert runs[runs["tags.countboard.role"] == "sweep"].status.tolist() == ["FINISHED"]
    computed = pd.Series(calls.read_text().split())
    assert sorted(computed.unique()) == [f"u{i:03d}" for i in range(12)]
    assert computed.value_counts().max() <= 2  # only the chunk in flight at the cancel is computed again


def test_gpu_preset_on_a_partition_without_gpus_ends_the_sweep_failed(slurm, tmp_path):
    env = sweep_env(tmp_path, SLURM_CONF=str(slurm.conf))
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *TOY, "-m", "hydra/launcher=slurm_gpu", "model=toy,toy_double",
           "progress=false", f"tracking.store_dir={tmp_path / 'mlruns'}"]
    proc = run(cmd, tmp_path, env, timeout=120)
    assert proc.returncode != 0
    runs = store_runs(tmp_path / "mlruns")
    parent = runs[runs["tags.countboard.role"] == "sweep"].iloc[0]
    assert parent.status == "FAILED" and "sbatch" in parent["tags.error"].lower(), parent["tags.error"]
    assert (runs["tags.countboard.role"] == "cell").sum() == 0
