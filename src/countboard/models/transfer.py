"""Results of a batch leave the device in one transfer; small inputs reach it without waiting.

A counter computes everything of a batch on its device and reads the results with :func:`to_host`: the tensors are
packed into one float64 buffer, copied to the host once (the batch's one synchronisation on CUDA) and unpacked.
float64 holds every value these tensors carry exactly (booleans, integer counts below ``2**53``, float32 and float64
values). The other way, :func:`to_device` copies host values (image sizes, clipping ranges) from page-locked memory
without waiting: a plain copy from pageable memory would make the host wait for everything queued on the device.

Example:
    >>> import torch
    >>> [a.tolist() for a in to_host([torch.tensor([1, 2]), torch.tensor([[True], [False]])])]
    [[1, 2], [[True], [False]]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def to_host(tensors: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """``tensors`` (on one device) as numpy arrays of their own dtypes, through one device-to-host copy."""
    return HostRead(tensors).result()


class HostRead:
    """:func:`to_host` of tensors whose copy to the host was started (:func:`to_host_later`) but not waited for."""

    def __init__(self, tensors: Sequence[torch.Tensor]):
        self._meta = [(tuple(t.shape), t.dtype) for t in tensors]
        self._event = None
        if not tensors:
            self._flat = None
            return
        flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors])
        if flat.device.type == "cuda":
            host = torch.empty(flat.shape, dtype=torch.float64, pin_memory=True)
            host.copy_(flat, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
            self._flat = host
        else:
            self._flat = flat.cpu()

    def result(self) -> list[np.ndarray]:
        """The arrays (waiting only for the work queued before the copy, on CUDA)."""
        if self._flat is None:
            return []
        if self._event is not None:
            self._event.synchronize()
        flat = self._flat.numpy()
        out, start = [], 0
        for shape, dtype in self._meta:
            n = int(np.prod(shape)) if shape else 1
            np_dtype = np.bool_ if dtype == torch.bool else torch.empty((), dtype=dtype).numpy().dtype
            out.append(flat[start:start + n].reshape(shape).astype(np_dtype))
            start += n
        return out


def to_host_later(tensors: Sequence[torch.Tensor]) -> HostRead:
    """Start :func:`to_host`'s one copy of ``tensors`` without waiting for it: on CUDA into page-locked memory, with
    an event after it, so that the host can queue the next batch's work before it reads this one's
    (``HostRead.result``).

    Example:
        >>> [a.tolist() for a in to_host_later([torch.tensor([1, 2]), torch.tensor(True)]).result()]
        [[1, 2], True]
    """
    return HostRead(tensors)


def split_parts(flat: Sequence, lengths: Sequence[int]) -> list[list]:
    """``flat`` cut back into consecutive parts of ``lengths`` (what was concatenated for one transfer).

    Example:
        >>> split_parts([1, 2, 3, 4], [1, 0, 3])
        [[1], [], [2, 3, 4]]
    """
    out, start = [], 0
    for n in lengths:
        out.append(list(flat[start:start + n]))
        start += n
    return out


def to_device(values, device: str | torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.as_tensor(values, dtype)`` on ``device``; on CUDA through page-locked memory, not waiting for the
    device (the copy is ordered on the stream before the work that reads it).

    Example:
        >>> to_device([[3, 4]], "cpu", torch.float64).tolist()
        [[3.0, 4.0]]
    """
    host = torch.as_tensor(values, dtype=dtype)
    dev = torch.device(device)
    if dev.type != "cuda":
        return host.to(dev)
    return host.pin_memory().to(dev, non_blocking=True)
