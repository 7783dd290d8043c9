"""What the SLURM launcher of ``hydra/launcher=slurm_cpu|slurm_gpu`` adds to submitit's: a watch for lost jobs.

The launcher class itself lives in ``hydra_plugins.countboard_launcher`` (Hydra loads plugins from there only).

submitit learns a job's end from ``sacct``. Without accounting (no slurmdbd) ``sacct`` fails, every job stays
UNKNOWN, and a job that was cancelled, killed or lost with its node is waited for forever. This launcher also asks
``squeue`` (which needs only slurmctld): a job that has left the queue and still has no result after
``lost_after_s`` seconds (time for a shared filesystem to show the result file) is reported lost. Every job that
did not return is named in one error at the end, after the others have finished, so that a rerun resumes exactly
those cells.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

from countboard.errors import CountboardError

log = logging.getLogger("countboard")


class SlurmJobsFailed(CountboardError):
    """Some SLURM jobs of a sweep ended without a result (cancelled, failed, timed out or lost)."""


@dataclass
class CountboardSlurmConf(SlurmQueueConf):
    """submitit's SLURM options plus the lost-job watch (see the module docstring)."""

    _target_: str = "hydra_plugins.countboard_launcher.slurm_launcher.SlurmLauncher"
    lost_after_s: int = 120
    poll_s: float = 5.0


def squeue_states(job_ids: Sequence[str], timeout_s: float = 30) -> dict[str, str] | None:
    """``{job id: state}`` of the given jobs still known to slurmctld (array tasks one by one), or None when
    ``squeue`` cannot answer (then nothing is concluded)."""
    mains = sorted({j.split("_")[0] for j in job_ids})
    if not mains:
        return {}
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(mains)], capture_output=True,
                              text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("squeue did not answer (%s); lost jobs cannot be detected until it does", exc)
        return None
    if proc.returncode != 0:
        # squeue exits 1 with "Invalid job id specified" once every listed job has left the queue
        if "invalid job id" in proc.stderr.lower():
            return {}
        log.warning("squeue failed (%s); lost jobs cannot be detected until it answers", proc.stderr.strip())
        return None
    states = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def wait_for_jobs(jobs: Sequence[Any], lost_after_s: float, poll_s: float,
                  queue: Callable[[Sequence[str]], dict[str, str] | None] = squeue_states,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                  ) -> set[int]:
    """Wait until every submitit job is done or lost; return the indices of the lost ones.

    A job is lost when it has been absent from ``queue`` for ``lost_after_s`` without becoming done.
    """
    pending = dict(enumerate(jobs))
    absent_since: dict[int, float] = {}
    lost: set[int] = set()
    while True:
        for i, job in list(pending.items()):
            if job.done():
                del pending[i]
        if not pending:
            return lost
        states = queue([str(j.job_id) for j in pending.values()])
        now = clock()
        for i, job in list(pending.items()):
            if states is None or str(job.job_id) in states:
                absent_since.pop(i, None)
                continue
            # done(force_check=True) asks sacct once more: with accounting the job's real end state wins
            if now - absent_since.setdefault(i, now) >= lost_after_s and not job.done(force_check=True):
                log.error("SLURM job %s left the queue %.0fs ago without a result: lost", job.job_id,
                          now - absent_since[i])
                lost.add(i)
                del pending[i]
        if pending:
            sleep(poll_s)


def collect(jobs: Sequence[Any], lost: set[int], overrides: Sequence[Sequence[str]]) -> list[JobReturn]:
    """The jobs' results, or one error naming every job that has none."""
    results, problems = [], []
    for i, job in enumerate(jobs):
        what = " ".join(filter_overrides(overrides[i]))
        if i in lost:
            problems.append(f"job {job.job_id} ({what}) left the queue without a result (cancelled, killed or its "
                            f"node lost; no accounting to say which); log: {job.paths.stderr}")
            continue
        try:
            results.append(job.results()[0])
        except Exception as exc:  # UncompletedJobError (cancelled, timeout, node failure) or a crash in submitit
            text = " ".join(str(exc).split()) or type(exc).__name__  # submitit puts the state on a later line
            problems.append(f"job {job.job_id} ({what}): {text[:500]}; log: {job.paths.stderr}")
    if problems:
        raise SlurmJobsFailed(f"{len(problems)} of {len(jobs)} SLURM jobs ended without a result (rerun the same "
                              "command to resume them): " + " | ".join(problems))
    return results


#: SLURM's client programs a sweep needs where it is launched: sbatch submits, srun starts the job's task, squeue
#: watches the queue.
SLURM_TOOLS = ("sbatch", "srun", "squeue")


def missing_slurm_tools() -> None:
    """Raise one clear error when SLURM's client programs are not on PATH here (before anything is submitted)."""
    import shutil
    import socket

    missing = [t for t in SLURM_TOOLS if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"hydra/launcher=slurm_*: {', '.join(missing)} not found on PATH on {socket.gethostname()}"
                           "; launch the sweep from a SLURM login node (docs/cluster.md), or drop hydra/launcher "
                           "to run it on this machine")
