"""A job's inputs decoded ahead of use: images read by ``DataLoader`` workers while the model computes.

A task that reads its inputs from the dataset lists, for a chunk of units, the keys it will read, in the order it
reads them (``Task.input_keys``). The engine opens one ``InputStream`` over the keys of every chunk of the run, in
order, and the task takes each input with ``RunContext.load(dataset, key)``:

- ``num_workers > 0``: a ``torch.utils.data.DataLoader`` reads the keys in that many worker processes, ahead of
  the model and in order. On CUDA (``pin_memory``) each image is copied into page-locked memory on the way
  (``item.image`` stays a NumPy array, a view of the pinned tensor), so ``torch.from_numpy(item.image)
  .to(device, non_blocking=True)`` is an asynchronous copy.
- ``num_workers=0``: each input is read in the job's process when the task asks for it.

A read that raises is carried back with its exception, raised again where the task asks for that input: an
unreadable image is a failed unit with the same message whatever the number of workers. If a worker dies (killed,
or crashed inside a decoder), the workers are ended with a warning and the remaining inputs are read in the job's
process; if the job's process dies, the kernel ends its workers (``processes.die_with_parent``). ``num_workers=auto`` uses one worker per usable core but one, at most ``MAX_AUTO_WORKERS``.

Example:
    >>> stream = InputStream({"a": 1, "b": 2}.__getitem__, ["a", "b"], num_workers=0)
    >>> stream.get("b"), stream.get("a")
    (2, 1)
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.context
import os
import pickle
import signal
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from countboard.config import AUTO

log = logging.getLogger("countboard")

#: ``num_workers=auto`` never starts more workers than this (decoding an image takes milliseconds).
MAX_AUTO_WORKERS = 4
#: Inputs each worker reads ahead of the task.
PREFETCH_PER_WORKER = 4


def usable_cpus() -> int:
    """Cores this process may run on (its affinity mask: a container's or a scheduler's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_workers(value: Any) -> int:
    """``num_workers`` as a number: ``auto`` (or None) is one per usable core but one, at most
    ``MAX_AUTO_WORKERS`` (0 on a single core); a number is itself.

    Example:
        >>> resolve_workers(2), resolve_workers("auto") <= MAX_AUTO_WORKERS
        (2, True)
    """
    if value is None or str(value) == AUTO:
        return max(0, min(MAX_AUTO_WORKERS, usable_cpus() - 1))
    return int(value)


class UnreadableInput(RuntimeError):
    """A read failed in a worker with an exception that cannot travel between processes (its text is kept)."""


class _Failed:
    """The exception of a read, carried back from a worker in place of the input."""

    def __init__(self, exc: BaseException):
        self.exc = exc


class _Read:
    """One read input (or its failure); pins the image on the DataLoader's pin-memory thread (CUDA only)."""

    def __init__(self, key: str, value: Any):
        self.key, self.value = key, value

    def pin_memory(self, *_: Any) -> _Read:
        import numpy as np
        import torch

        image = getattr(self.value, "image", None)
        if isinstance(image, np.ndarray) and image.dtype != object:
            self.value.image = torch.from_numpy(np.ascontiguousarray(image)).pin_memory().numpy()
        return self


def _portable(exc: Exception) -> _Failed:
    try:
        pickle.loads(pickle.dumps(exc))
        return _Failed(exc)
    except Exception:  # an exception whose constructor pickling cannot replay
        return _Failed(UnreadableInput(f"{type(exc).__name__}: {exc}"))


def _first(batch: Any) -> Any:
    return batch


def _worker_init(_: int) -> None:
    """A worker ends with the job's process, however that ends (a ``kill -9`` or the OOM killer included):
    otherwise it would stay, re-parented to init, blocked on a full pipe that no one reads."""
    from countboard.processes import die_with_parent

    die_with_parent(signal.SIGKILL)


class _Reads:
    """The map-style dataset the workers index: read key ``i``, never raising."""

    def __init__(self, load: Callable[[str], Any], keys: Sequence[str]):
        self.load, self.keys = load, list(keys)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> _Read:
        key = self.keys[i]
        try:
            return _Read(key, self.load(key))
        except Exception as exc:  # an unreadable input is a failed unit, never a dead worker
            return _Read(key, _portable(exc))


@contextlib.contextmanager
def _own_sigchld() -> Iterator[None]:
    """Keep the process's SIGCHLD handler: torch's raises the death of a worker from wherever the main thread is
    (inside the model, where it would fail a unit or the job); without it the death is seen where the next input
    is taken (within ``MP_STATUS_CHECK_INTERVAL``), and the job reads on without the workers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGCHLD)
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, previous if previous is not None else signal.SIG_DFL)


def _worker_context() -> multiprocessing.context.BaseContext:
    """The standard library's own start method for the workers, never the process's default: a job launched by
    joblib's loky backend has loky's context as its default, whose processes the DataLoader cannot start."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else methods[0])


class InputStream:
    """Inputs ``load(key)`` for ``keys``, read ahead by ``num_workers`` processes (see the module docstring).

    Args:
        load: Reads one input (a dataset's ``load``).
        keys: Every key the job will ask for, in the order it asks (a key may come more than once).
        num_workers: Worker processes (0: read in this process when asked for).
        pin_memory: Copy images into page-locked memory (only on CUDA, where it makes copies asynchronous).
    """

    def __init__(self, load: Callable[[str], Any], keys: Sequence[str], num_workers: int = 0,
                 pin_memory: bool = False):
        self._load = load
        self._pending: Counter[str] = Counter(keys)
        self._ahead: dict[str, deque] = {}
        self._it = None
        self.num_workers = int(num_workers) if keys else 0
        if self.num_workers > 0:
            from torch.utils.data import DataLoader

            loader = DataLoader(_Reads(load, keys), batch_size=None, shuffle=False, num_workers=self.num_workers,
                                collate_fn=_first, pin_memory=bool(pin_memory),
                                prefetch_factor=PREFETCH_PER_WORKER, multiprocessing_context=_worker_context(),
                                worker_init_fn=_worker_init)
            try:
                with _own_sigchld():
                    self._it = iter(loader)
            except Exception as exc:  # workers cannot start here (e.g. inside a daemonic process): read in-process
                log.warning("input loader workers could not start (%s: %s); reading inputs in this process",
                            type(exc).__name__, exc)
                self._it, self.num_workers = None, 0

    def get(self, key: str) -> Any:
        """The input ``key``; raises what its read raised. A key that was not listed is read now."""
        queue = self._ahead.get(key)
        if queue:
            value = queue.popleft()
        elif self._it is not None and self._pending[key] > 0:
            value = self._next(key)
        else:
            value = self._read(key)
        if isinstance(value, _Failed):
            raise value.exc
        return value

    def _read(self, key: str) -> Any:
        try:
            return self._load(key)
        except Exception as exc:
            return _Failed(exc)

    def _next(self, key: str) -> Any:
        """Take reads from the workers up to ``key``'s, keeping the others for later."""
        while True:
            try:
                read = next(self._it)
            except StopIteration:
                self.close()
                return self._read(key)
            except Exception as exc:  # a worker died: the rest is read here
                log.warning("input loader workers stopped (%s: %s); reading the remaining inputs in this process",
                            type(exc).__name__, exc)
                self.close()
                return self._read(key)
            self._pending[read.key] -= 1
            if read.key == key:
                return read.value
            self._ahead.setdefault(read.key, deque()).append(read.value)

    def close(self) -> None:
        """End the workers (what they read ahead and was not taken is dropped)."""
        it, self._it = self._it, None
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    def __enter__(self) -> InputStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
