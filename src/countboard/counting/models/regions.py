"""Connected regions of a stack of masks, on the masks' device: what CLIPSeg's counts are made of.

:func:`label_rounds` labels the 8-connected regions of each ``(H, W)`` mask of an ``(N, H, W)`` stack (never
across masks) with tensor ops only, by hooking and pointer jumping (union-find on a parallel machine). Every
foreground pixel starts as its own tree (its parent is its own index in the stack). A round looks at every pair of
foreground neighbours (right, down and both diagonals: each pair once), and hooks the smaller of their two parents
onto the larger (a scatter-max into the parent array), then replaces every parent by its grandparent a few times.
Parents only grow and stay inside their region, so the trees never cycle; a round that changes nothing leaves every
pixel pointing at its region's root, the same for all the pixels of a region: the labelling is exact. Whole trees
merge at once, so the rounds needed grow with the logarithm of a region's size rather than its length (5-6 for
256 x 256 maps of smooth or pixel-noise foreground, where propagating labels through 3 x 3 neighbourhoods took
160-240). :func:`region_counts` counts, per mask, the regions big enough to count, as
``clipseg.regions_to_density_batch`` does on the host with scipy (its maps sum to these counts).

Rounds run in batches of ``steps`` without waiting for the device; whether the labelling has settled is read
together with the results (one transfer), and only a labelling that had not settled runs more rounds.
"""

from __future__ import annotations

import numpy as np
import torch

#: Neighbour offsets (row, column) covering each 8-connected pair of pixels once.
_NEIGHBOURS = ((0, 1), (1, 0), (1, 1), (1, -1))


def _shifted(dy: int, dx: int) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """Index expressions of the pixels ``p`` and of their neighbours ``p + (dy, dx)`` in an ``(N, H, W)`` stack."""
    def span(d: int) -> tuple[slice, slice]:
        return (slice(0, -d), slice(d, None)) if d > 0 else (slice(-d, None), slice(0, d)) if d < 0 else \
            (slice(None), slice(None))
    (ya, yb), (xa, xb) = span(dy), span(dx)
    return (slice(None), ya, xa), (slice(None), yb, xb)


def initial_parents(mask: torch.Tensor) -> torch.Tensor:
    """Every pixel its own parent: ``arange(N * H * W)`` on the mask's device."""
    return torch.arange(mask.numel(), device=mask.device)


def label_rounds(parents: torch.Tensor, mask: torch.Tensor, steps: int, jumps: int = 3
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` rounds of hooking and ``jumps`` pointer jumps; the parents and whether the last round changed
    nothing (then ``parents`` names each foreground pixel's region root).

    A pixel pair that is not a pair of foreground neighbours writes its own pixel's parent back to that pixel (a
    no-op of the scatter-max), so the writes spread over all addresses instead of contending for one.
    """
    n, h, w = mask.shape
    own = torch.arange(mask.numel(), device=mask.device).reshape(n, h, w)
    pairs = [(a, b, mask[a] & mask[b], own[a]) for a, b in (_shifted(dy, dx) for dy, dx in _NEIGHBOURS)]
    settled = torch.zeros((), dtype=torch.bool, device=mask.device)
    for _ in range(steps):
        before = parents
        parents = parents.clone()
        for a, b, both, index in pairs:
            grid = parents.reshape(n, h, w)
            pa, pb = grid[a], grid[b]
            target = torch.where(both, torch.minimum(pa, pb), index)
            value = torch.where(both, torch.maximum(pa, pb), pa)
            parents.scatter_reduce_(0, target.reshape(-1), value.reshape(-1), "amax")
        for _ in range(jumps):
            parents = parents[parents]
        settled = (parents == before).all()
    return parents, settled


def region_counts(probs: torch.Tensor, threshold: float, min_region: int, steps: int = 8,
                  force_tensor_ops: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per map of ``(N, H, W)`` probabilities: the number of 8-connected regions of ``probs >= threshold`` with at
    least ``max(min_region, 1)`` pixels and positive probability mass.

    Returns ``(counts, settled, labels, mask)``; when ``settled`` is False, continue with
    :func:`finish_counts` (a region whose labels need more than ``steps`` rounds). On a CPU device the labels come
    from scipy's labelling (the same regions, faster there than the rounds) unless ``force_tensor_ops``.
    """
    mask = probs >= threshold
    if probs.device.type == "cpu" and not force_tensor_ops:
        counts = _scipy_counts(probs.numpy(), mask.numpy(), threshold, min_region)
        return torch.from_numpy(counts), torch.ones((), dtype=torch.bool), None, mask
    labels, settled = label_rounds(initial_parents(mask), mask, steps)
    return _counts(probs, labels, mask, threshold, min_region), settled, labels, mask


#: 8-connected in the plane.
_PLANE = np.ones((3, 3), dtype=bool)


def _scipy_counts(probs: np.ndarray, mask: np.ndarray, threshold: float, min_region: int) -> np.ndarray:
    """On the CPU the host is the device: scipy's two-pass labelling (C), one map at a time.

    With ``threshold > 0`` every foreground pixel has a positive probability, so every region has positive mass
    and only the areas are read (and not even those when every region is big enough, ``min_region <= 1``).
    """
    from scipy import ndimage

    counts = np.zeros(len(mask), dtype=np.int64)
    labels = np.empty(mask.shape[1:], dtype=np.int32)
    smallest = max(int(min_region), 1)
    for k, m in enumerate(mask):
        n = ndimage.label(m, structure=_PLANE, output=labels)
        if n == 0:
            continue
        if smallest == 1 and threshold > 0:
            counts[k] = n
            continue
        flat = labels.ravel()
        good = np.bincount(flat, minlength=n + 1) >= smallest
        if threshold <= 0:
            good &= np.bincount(flat, weights=probs[k].ravel(), minlength=n + 1) > 0
        counts[k] = int(good[1:].sum())
    return counts


def settle(labels: torch.Tensor, mask: torch.Tensor, steps: int = 8) -> torch.Tensor:
    """More rounds of :func:`label_rounds` until the labelling settles (one host check per ``steps`` rounds)."""
    settled = torch.zeros((), dtype=torch.bool)
    while not bool(settled):
        labels, settled = label_rounds(labels, mask, steps)
    return labels


def finish_counts(probs: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, threshold: float, min_region: int,
                  steps: int = 8) -> torch.Tensor:
    """Rounds until the labelling settles, then the counts."""
    return _counts(probs, settle(labels, mask, steps), mask, threshold, min_region)


def region_sums(probs: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, with_mass: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per region root (an index into the flattened stack; ``labels`` from :func:`label_rounds`): its foreground
    area and probability mass, float64. Background pixels add zeros to their own slot instead of being left out, so
    nothing here indexes with a boolean mask (which would wait for the device)."""
    flat = mask.reshape(-1)
    area = torch.zeros(flat.numel(), dtype=torch.float64, device=mask.device).index_add_(0, labels, flat.double())
    if not with_mass:
        return area, None
    values = probs.reshape(-1).to(torch.float64)
    return area, torch.zeros_like(area).index_add_(0, labels, torch.where(flat, values, torch.zeros_like(values)))


def _counts(probs: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, threshold: float,
            min_region: int) -> torch.Tensor:
    """Per map, the region roots with enough area and positive mass (positive already when ``threshold > 0``)."""
    area, mass = region_sums(probs, labels, mask, with_mass=threshold <= 0)
    good = area >= max(int(min_region), 1)
    if mass is not None:
        good &= mass > 0
    return good.reshape(len(mask), -1).sum(dim=1)
