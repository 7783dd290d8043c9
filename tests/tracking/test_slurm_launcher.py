"""The SLURM launcher: lost jobs found without accounting, failures named, a failed submission ends the parent run
FAILED. The real cluster is exercised in tests/integration/test_slurm.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from countboard.tracking.slurm import (
    SlurmJobsFailed,
    collect,
    missing_slurm_tools,
    squeue_states,
    wait_for_jobs,
)
from tests.conftest import FIXTURES, run_sweep, store_runs, sweep_env

TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config"]


class FakeJob:
    """A submitit job whose end is scripted: done at ``done_at`` (None: never, the way an UNKNOWN job looks when
    sacct cannot answer)."""

    def __init__(self, job_id: str, clock, done_at: float | None, result=None, error: Exception | None = None):
        self.job_id, self.clock, self.done_at = job_id, clock, done_at
        self.result, self.error = result, error
        self.paths = SimpleNamespace(stderr=Path(f"/logs/{job_id}_0_log.err"))

    def done(self, force_check: bool = False) -> bool:
        return self.done_at is not None and self.clock() >= self.done_at

    def results(self):
        if self.error:
            raise self.error
        return [self.result]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt


def test_a_job_gone_from_the_queue_without_a_result_is_lost_after_the_grace_period():
    clock = Clock()
    jobs = [FakeJob("7_0", clock, done_at=30), FakeJob("7_1", clock, done_at=None), FakeJob("7_2", clock, None)]
    # 7_1 leaves the queue at t=20 and never produces a result; 7_2 stays queued until t=100, then finishes late
    jobs[2].done_at = 100

    def queue(ids):
        return {j: "RUNNING" for j in ids if (j == "7_1" and clock.t < 20) or (j == "7_2" and clock.t < 100)
                or j == "7_0"}

    lost = wait_for_jobs(jobs, lost_after_s=60, poll_s=5, queue=queue, clock=clock, sleep=clock.sleep)
    assert lost == {1}
    assert 80 <= clock.t <= 105  # noticed at 20 s + 60 s grace, not waited on forever


def test_without_squeue_nothing_is_concluded():
    clock = Clock()
    jobs = [FakeJob("8_0", clock, done_at=50)]
    assert wait_for_jobs(jobs, 10, 5, queue=lambda ids: None, clock=clock, sleep=clock.sleep) == set()
    assert clock.t == 50


def test_collect_names_every_job_without_a_result():
    clock = Clock()
    jobs = [FakeJob("9_0", clock, 0, result="r0"), FakeJob("9_1", clock, 0, error=RuntimeError("CANCELLED by 0")),
            FakeJob("9_2", clock, None)]
    overrides = [["model=a"], ["model=b"], ["model=c"]]
    with pytest.raises(SlurmJobsFailed) as err:
        collect(jobs, {2}, overrides)
    text = str(err.value)
    assert "2 of 3 SLURM jobs" in text and "job 9_1 (model=b): CANCELLED by 0" in text
    assert "job 9_2 (model=c) left the queue" in text and "/logs/9_2_0_log.err" in text
    assert collect(jobs[:1], set(), overrides) == ["r0"]


def _fake_bin(folder: Path, name: str, script: str) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_squeue_output_is_read_task_by_task(tmp_path, monkeypatch):
    _fake_bin(tmp_path / "bin", "squeue", 'echo "41_0 RUNNING"; echo "41_1 PENDING"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert squeue_states(["41_0", "41_1"]) == {"41_0": "RUNNING", "41_1": "PENDING"}
    _fake_bin(tmp_path / "bin", "squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1\n')
    assert squeue_states(["41_0"]) == {}
    _fake_bin(tmp_path / "bin", "squeue", 'echo "Unable to contact slurm controller" >&2; exit 1\n')
    assert squeue_states(["41_0"]) is None


def test_a_refused_submission_ends_the_sweep_run_failed_with_sbatch_message(tmp_path):
    bin_dir = tmp_path / "bin"
    _fake_bin(bin_dir, "sbatch", f'for a in "$@"; do [ -f "$a" ] && cp "$a" {tmp_path}/submitted.sh; done\n'
                                 'echo "sbatch: error: Batch job submission failed: Requested node configuration '
                                 'is not available" >&2; exit 1\n')
    for tool in ("srun", "squeue"):  # present, as on any login node
        _fake_bin(bin_dir, tool, "exit 0\n")
    env = sweep_env(tmp_path, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = run_sweep([*TOY, "-m", "model=toy,toy_double", "hydra/launcher=slurm_gpu"], tmp_path, env=env,
                     check=False)
    assert proc.returncode != 0
    runs = store_runs(tmp_path / "mlruns")
    parent = runs[runs["tags.countboard.role"] == "sweep"].iloc[0]
    assert parent["status"] == "FAILED"
    assert "Requested node configuration is not available" in parent["tags.error"]
    script = (tmp_path / "submitted.sh").read_text()  # slurm_gpu: one task, one GPU per array task
    assert "#SBATCH --gpus-per-node=1" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "#SBATCH --array=0-1" in script


def test_a_machine_without_slurm_tools_is_named_before_anything_is_submitted(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeError, match=r"sbatch, srun, squeue not found on PATH on .*login node"):
        missing_slurm_tools()
    for tool in ("sbatch", "srun", "squeue"):
        _fake_bin(tmp_path / "empty", tool, "exit 0\n")
    missing_slurm_tools()
