"""Named points where a fault test (``tests/faults``, ``benchmarks/faults.py``) kills a process on purpose.

``hit(name)`` does nothing unless ``COUNTBOARD_FAILPOINT`` equals ``name``; then the process SIGKILLs itself, the
way a node loss or ``kill -9`` would, at a place chosen for being the worst moment of that operation. With
``COUNTBOARD_FAILPOINT_KILL=PGID`` the point SIGKILLs that process group instead (the tracking server the job
talks to), once, waits for it to be gone, and the job goes on: the store dies at exactly that moment.
"""

from __future__ import annotations

import os
import signal
import time

ENV = "COUNTBOARD_FAILPOINT"
KILL_ENV = "COUNTBOARD_FAILPOINT_KILL"

#: The points, and where they are.
POINTS = {
    "checkpoint_write": "a checkpoint part written locally, not yet in the store",
    "log_params": "a cell's run created, its params not yet logged",
    "cell_start": "a cell's lease taken, its run not yet looked up or created",
    "cell_artifacts": "a cell's units computed, its result artifacts not yet logged",
    "cell_metrics": "a cell's artifacts logged, its metrics not yet",
    "cell_end": "a cell's metrics logged, its run not yet ended",
    "index_build": "the index copy written, not yet renamed over the index",
    "image_write": "the first generated image saved in a task's image_dir, the next ones not yet",
    "repair_build": "doctor --fix: a recovered database written beside the damaged one, not yet checked",
    "repair_built": "doctor --fix: the recovered database checked, no intent file yet",
    "repair_intent": "doctor --fix: the intent file written, mlflow.db not yet touched",
    "repair_kept": "doctor --fix: the damaged database and its sidecars linked to their kept names",
    "repair_sidecars": "doctor --fix: the damaged database's -wal/-shm removed, the recovered one not renamed in",
    "repair_swapped": "doctor --fix: the recovered database renamed over mlflow.db, the intent file not removed",
}


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie, which holds no socket, does not count)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def _kill_group(pgid: int, wait_s: float = 10.0) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def hit(name: str) -> None:
    """SIGKILL this process if ``$COUNTBOARD_FAILPOINT`` names this point (or the process group of
    ``$COUNTBOARD_FAILPOINT_KILL``, the first time the point is hit)."""
    if os.environ.get(ENV) != name:
        return
    target = os.environ.get(KILL_ENV, "")
    if target.isdigit():
        os.environ.pop(ENV)  # once: the job then meets the dead store
        _kill_group(int(target))
        return
    os.kill(os.getpid(), signal.SIGKILL)
