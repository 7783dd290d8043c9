"""Named points where a fault test (``tests/faults``, ``benchmarks/faults.py``) kills the process on purpose.

``hit(name)`` does nothing unless ``COUNTBOARD_FAILPOINT`` equals ``name``; then the process SIGKILLs itself, the
way a node loss or ``kill -9`` would, at a place chosen for being the worst moment of that operation.
"""

from __future__ import annotations

import os
import signal

ENV = "COUNTBOARD_FAILPOINT"

#: The points, and where they are.
POINTS = {
    "checkpoint_write": "a checkpoint part written locally, not yet in the store",
    "log_params": "a cell's run created, its params not yet logged",
    "index_build": "the index copy written, not yet renamed over the index",
    "image_write": "the first generated image saved in a task's image_dir, the next ones not yet",
    "repair_build": "doctor --fix: a recovered database written beside the damaged one, not yet checked",
    "repair_built": "doctor --fix: the recovered database checked, no intent file yet",
    "repair_intent": "doctor --fix: the intent file written, mlflow.db not yet touched",
    "repair_kept": "doctor --fix: the damaged database and its sidecars linked to their kept names",
    "repair_sidecars": "doctor --fix: the damaged database's -wal/-shm removed, the recovered one not renamed in",
    "repair_swapped": "doctor --fix: the recovered database renamed over mlflow.db, the intent file not removed",
}


def hit(name: str) -> None:
    """SIGKILL this process if ``$COUNTBOARD_FAILPOINT`` names this point."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
