"""Kernels a counter asks for, counted on any machine: the figure a GPU's idle time follows.

A GPU idles when the host cannot launch kernels as fast as the GPU runs them. Every aten operator that is not a view
launches one kernel on a GPU, so the operators a process dispatches, counted with a ``TorchDispatchMode``, say how
much launching a counter needs per (image, class) pair, exactly and under any load. :class:`KernelCount` counts them
in a block (views and reshapes left out; casts, ``fill_`` and host synchronisations apart);
:func:`per_pair_marginal` turns two counts of different sizes into kernels per pair, so that loading and text
encoding cancel out. ``benchmarks/dispatch_budget.py`` prints the figures and ``tests/models/test_dispatch_budget.py``
holds every counter to its budget.

Example:
    >>> import torch
    >>> with KernelCount() as k:
    ...     x = torch.ones(3).view(3, 1) + 1
    >>> k.kernels, k.casts
    (2, 0)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from torch.utils._python_dispatch import TorchDispatchMode

#: Operators that launch no kernel: views, reshapes and aliases.
VIEWS = frozenset({
    "view", "_unsafe_view", "transpose", "permute", "expand", "slice", "select", "unsqueeze", "squeeze", "alias", "t",
    "as_strided", "split", "split_with_sizes", "unbind", "detach", "narrow", "_reshape_alias", "lift_fresh", "chunk",
    "reshape", "contiguous", "flatten", "resolve_conj", "resolve_neg", "view_as_real", "view_as", "expand_as",
    "numpy_T", "movedim", "unflatten"})
#: Operators that make the host wait for the device.
SYNCS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "item", "is_nonzero"})
#: Dtype and device copies.
CASTS = frozenset({"_to_copy", "to"})


class KernelCount(TorchDispatchMode):
    """Counts the operators dispatched inside the block (``ops``: every operator by name)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def kernels(self) -> int:
        return sum(v for k, v in self.ops.items() if k not in VIEWS)

    @property
    def casts(self) -> int:
        return sum(self.ops[k] for k in CASTS)

    @property
    def fills(self) -> int:
        return self.ops["fill_"]

    @property
    def syncs(self) -> int:
        return sum(self.ops[k] for k in SYNCS)

    def figures(self) -> Figures:
        return Figures(self.kernels, self.casts, self.fills, self.syncs)


@dataclass(frozen=True)
class Figures:
    """Kernels, casts, fills and host synchronisations of a count (or per pair, from :func:`per_pair_marginal`)."""

    kernels: float
    casts: float
    fills: float
    syncs: float


def per_pair_marginal(small: Figures, large: Figures, pairs: float) -> Figures:
    """``(large - small) / pairs``: what each of the ``pairs`` more of the larger count cost.

    Example:
        >>> per_pair_marginal(Figures(10, 2, 0, 1), Figures(30, 6, 0, 1), 10)
        Figures(kernels=2.0, casts=0.4, fills=0.0, syncs=0.0)
    """
    return Figures(*((b - a) / pairs for a, b in zip(
        (small.kernels, small.casts, small.fills, small.syncs),
        (large.kernels, large.casts, large.fills, large.syncs), strict=True)))
