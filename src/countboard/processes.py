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


_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = 9) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent ends, however it ends (SIGKILL included);
    a process whose parent has already gone ends now. Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere a
    no-op that returns False.

    Called first thing in a child that must not outlive the command that started it: a loader worker, a
    launcher's job process, a server the command runs. The kernel ties the signal to the *thread* that started
    the child, so it is meant for children started by a thread that lives as long as they should.

    """
    import ctypes
    import signal

    parent = os.getppid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig)) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # it died while the request was made (re-parented): nobody will send the signal
        os.kill(os.getpid(), signal.Signals(sig))
    return True


def _worker_dies_with_parent() -> None:
    """A launcher worker's initializer (importable by name, so that it travels to a spawned worker)."""
    die_with_parent()


def joblib_workers_die_with_parent() -> None:
    """Make every worker joblib's ``loky`` backend starts in this process end with it (SIGKILL when it dies, as its
    jobs' own loader workers do): Hydra's joblib launcher names the backend ``loky`` and offers no initializer, so
    the backend registered under that name is joblib's own with one. A no-op without joblib."""
    import functools

    try:
        from joblib import register_parallel_backend
        from joblib._parallel_backends import LokyBackend
    except ImportError:
        return
    register_parallel_backend("loky", functools.partial(LokyBackend, initializer=_worker_dies_with_parent))
