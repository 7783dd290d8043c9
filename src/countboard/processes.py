"""Whether a process of this host is still there: the one check behind leases, run owners, a served MLflow UI
and a stopped repair's leftovers."""

from __future__ import annotations

import os


def process_start(pid: int) -> str:
    """Start time of process ``pid`` in clock ticks since boot ("" if unknown): tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def pid_alive(pid: int | None, start: str = "") -> bool:
    """True while process ``pid`` exists (another user's too); with ``start`` (``process_start`` when it was
    recorded), a pid reused by a later process counts as gone. None is never alive.

    Example:
        >>> pid_alive(os.getpid()), pid_alive(None)
        (True, False)
    """
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return not start or not process_start(pid) or process_start(pid) == start
