"""Batch sizes chosen by memory (``batch_size=auto``), and model calls that outlive running out of it.

``Batching.batches(items, fn)`` calls ``fn`` on consecutive batches of ``items`` and yields each batch with its
outputs. When ``fn`` runs out of memory (``torch.cuda.OutOfMemoryError``, or ``MemoryError``), the batch is halved
and tried again; the batches already done keep their outputs, and the later ones stay at the smaller size. Any
other exception is yielded in place of the outputs, so that the task records that batch's units as failed and goes
on. A fixed ``batch_size`` only ever shrinks that way; with ``batch_size=auto``:

- on CUDA the first batch is a probe of ``PROBE_ITEMS`` items, measured: the peak memory it allocated above what
  was allocated before, per item, sets the size to ``GPU_MEMORY_SHARE`` of the free memory after it, divided by
  that footprint (at most ``GPU_CAP``); an out-of-memory halves it as above;
- on the CPU, where running out of memory kills the process rather than raising, the size is fixed at the start:
  half the memory available to the process (``MemAvailable``, or the cgroup's limit less its usage when lower)
  divided by ``CPU_ITEM_BYTES``, at most ``CPU_CAP``.

Which batch an item goes through does not change its record (``config.OPERATIONAL_KEYS``): ``auto`` and a fixed
size give the same records.

Example:
    >>> b = Batching(2, "cpu")
    >>> [(batch, out) for batch, out in b.batches([1, 2, 3], lambda xs: [x * 10 for x in xs])]
    [([1, 2], [10, 20]), ([3], [30])]
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from countboard.config import AUTO

log = logging.getLogger("countboard")

#: Items of the measured first batch on CUDA.
PROBE_ITEMS = 2
#: Share of the free GPU memory an auto batch may fill (the rest: allocator fragmentation, other tensors).
GPU_MEMORY_SHARE = 0.7
#: Largest auto batch on CUDA.
GPU_CAP = 256
#: Memory budgeted per item on the CPU: a ViT-B counter at 960 px holds a few hundred MiB of fp32 activations.
CPU_ITEM_BYTES = 512 * 2**20
#: Largest auto batch on the CPU (larger batches buy nothing there).
CPU_CAP = 32


def available_ram() -> int:
    """Bytes of memory this process can still use: ``MemAvailable``, lowered by a cgroup (v2) limit."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    if avail is None:
        import os

        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            avail = min(avail, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(int(avail), 0)


def cpu_auto_size(avail: int | None = None) -> int:
    """The CPU's auto batch size: half of ``avail`` bytes (default: ``available_ram()``) per ``CPU_ITEM_BYTES``.

    Example:
        >>> cpu_auto_size(8 * 2**30), cpu_auto_size(0), cpu_auto_size(2**40)
        (8, 1, 32)
    """
    avail = available_ram() if avail is None else avail
    return max(1, min(CPU_CAP, int(avail // 2 // CPU_ITEM_BYTES)))


def is_auto(value: Any) -> bool:
    return str(value) == AUTO


class GpuMemory(Protocol):
    """What the CUDA probe reads of a device's memory (``TorchCudaMemory``; tests pass a fake)."""

    def start(self) -> None: ...

    def peak_above_start(self) -> int: ...

    def free(self) -> int: ...

    def release(self) -> None: ...


class TorchCudaMemory:
    """``torch.cuda``'s memory statistics of one device."""

    def __init__(self, device: str):
        import torch

        self.torch, self.device = torch, torch.device(device)
        self._base = 0

    def start(self) -> None:
        self.torch.cuda.synchronize(self.device)
        self.torch.cuda.reset_peak_memory_stats(self.device)
        self._base = self.torch.cuda.memory_allocated(self.device)

    def peak_above_start(self) -> int:
        self.torch.cuda.synchronize(self.device)
        return int(self.torch.cuda.max_memory_allocated(self.device) - self._base)

    def free(self) -> int:
        return int(self.torch.cuda.mem_get_info(self.device)[0])

    def release(self) -> None:
        self.torch.cuda.empty_cache()


def out_of_memory_errors() -> tuple[type[BaseException], ...]:
    """``MemoryError``, and ``torch.cuda.OutOfMemoryError`` once torch is imported (a job without torch never
    imports it for this)."""
    torch = sys.modules.get("torch")
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    return (MemoryError, oom) if isinstance(oom, type) else (MemoryError,)


class Batching:
    """The batch size of a job (see the module docstring).

    Args:
        batch_size: A positive number, or ``"auto"``.
        device: The job's device; ``auto`` measures on ``cuda`` / ``cuda:N`` and uses the RAM rule elsewhere.
        gpu: The memory statistics to measure with on CUDA (default: ``torch.cuda``'s).
    """

    def __init__(self, batch_size: int | str, device: str = "cpu", gpu: GpuMemory | None = None):
        self.auto = is_auto(batch_size)
        self.cuda = str(device).startswith("cuda")
        self._gpu = gpu
        self._device = str(device)
        self.measured = not (self.auto and self.cuda)
        if not self.auto:
            self.size = int(batch_size)
        elif self.cuda:
            self.size = PROBE_ITEMS
        else:
            self.size = cpu_auto_size()
        if self.size < 1:
            raise ValueError(f"batch_size must be a positive number or auto, got {batch_size!r}")

    def batches(self, items: Sequence[Any], fn: Callable[[list[Any]], Sequence[Any]]
                ) -> Iterator[tuple[list[Any], list[Any] | Exception]]:
        """``(batch, list(fn(batch)))`` for consecutive batches of ``items``; an exception of ``fn`` other than
        running out of memory in place of the outputs (also out of memory with one item)."""
        items = list(items)
        start = 0
        while start < len(items):
            batch = items[start:start + self.size]
            oom = ""
            try:
                out = self._call(fn, batch)
            except out_of_memory_errors() as exc:
                if len(batch) == 1:
                    out = exc
                else:
                    oom = type(exc).__name__
            except Exception as exc:  # the task records the batch's units as failed
                out = exc
            if oom:  # outside the except block, so that the failed batch's tensors can be freed
                self._shrink(len(batch), oom)
                continue
            yield batch, out
            start += len(batch)

    def _call(self, fn: Callable[[list[Any]], Sequence[Any]], batch: list[Any]) -> list[Any]:
        if self.measured:
            return list(fn(batch))
        gpu = self._memory()
        gpu.start()
        out = list(fn(batch))
        per_item = max(gpu.peak_above_start() / len(batch), 1.0)
        self.size = max(1, min(GPU_CAP, int(gpu.free() * GPU_MEMORY_SHARE // per_item)))
        self.measured = True
        log.info("batch_size=auto: %.1f MiB per item on %s, %.0f MiB free: batches of %d", per_item / 2**20,
                 self._device, gpu.free() / 2**20, self.size)
        return out

    def _memory(self) -> GpuMemory:
        if self._gpu is None:
            self._gpu = TorchCudaMemory(self._device)
        return self._gpu

    def _shrink(self, tried: int, error: str) -> None:
        self.size = max(1, tried // 2)
        self.measured = True
        gc.collect()
        if self.cuda:
            self._memory().release()
        log.warning("out of memory with a batch of %d (%s); going on with batches of %d", tried, error,
                    self.size)
