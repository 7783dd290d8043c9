"""Connected regions of a stack of masks, on the masks' device: what CLIPSeg's counts are made of.

:func:`label_regions` labels the 8-connected regions of each ``(H, W)`` mask of an ``(N, H, W)`` stack (never
across masks) with tensor ops only: every foreground pixel starts with its own index and repeatedly takes the
largest label of its 3 x 3 neighbourhood (a max-pool), then the label of the pixel its label names (pointer
jumping, which doubles the distance a label travels per round). Labels only grow and stay inside their region, and
a round that changes nothing leaves each region with one label, the largest index in it: the labelling is exact.
:func:`region_counts` counts, per mask, the regions big enough to count, as
``clipseg.regions_to_density_batch`` does on the host with scipy (its maps sum to these counts).

Rounds run in batches of ``steps`` without waiting for the device; whether the labelling has settled is read
together with the results (one transfer), and only a labelling that had not settled runs more rounds.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def label_rounds(labels: torch.Tensor, mask: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` rounds of propagation and pointer jumping; the labels and whether the last round changed nothing.

    ``labels``: ``(N, H, W)`` float labels (0 background, else ``1 + index`` of a pixel of the same region).
    """
    n, h, w = labels.shape
    settled = torch.zeros((), dtype=torch.bool, device=labels.device)
    for _ in range(steps):
        grown = F.max_pool2d(labels[:, None], 3, stride=1, padding=1)[:, 0] * mask
        flat = grown.reshape(n, h * w)
        jumped = flat.gather(1, (flat.long() - 1).clamp_(min=0)).reshape(n, h, w) * mask
        settled = (jumped == labels).all()
        labels = jumped
    return labels, settled


def initial_labels(mask: torch.Tensor) -> torch.Tensor:
    """Each foreground pixel labelled ``1 + `` its index in its map (float32 while exact, else float64)."""
    n, h, w = mask.shape
    dtype = torch.float32 if h * w < 2**24 else torch.float64
    index = torch.arange(1, h * w + 1, device=mask.device, dtype=dtype).reshape(1, h, w)
    return index * mask.to(dtype)


def region_counts(probs: torch.Tensor, threshold: float, min_region: int, steps: int = 12,
                  force_tensor_ops: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per map of ``(N, H, W)`` probabilities: the number of 8-connected regions of ``probs >= threshold`` with at
    least ``max(min_region, 1)`` pixels and positive probability mass.

    Returns ``(counts, settled, labels, mask)``; when ``settled`` is False, continue with
    :func:`finish_counts` (a region whose labels need more than ``steps`` rounds). On a CPU device the labels come
    from scipy's labelling (the same regions, faster there than the rounds) unless ``force_tensor_ops``.
    """
    mask = probs >= threshold
    if probs.device.type == "cpu" and not force_tensor_ops:
        counts = _scipy_counts(probs.numpy(), mask.numpy(), min_region)
        return torch.from_numpy(counts), torch.ones((), dtype=torch.bool), None, mask
    labels, settled = label_rounds(initial_labels(mask), mask.to(torch.float32), steps)
    return _counts(probs, labels, mask, min_region), settled, labels, mask


def _scipy_counts(probs: np.ndarray, mask: np.ndarray, min_region: int) -> np.ndarray:
    """On the CPU the host is the device: scipy's two-pass labelling (C) finds the same regions in one pass."""
    from scipy import ndimage

    structure = np.zeros((3, 3, 3), dtype=bool)
    structure[1] = True  # 8-connected in the plane, nothing across maps
    labels, n = ndimage.label(mask, structure=structure)
    flat = labels.ravel()
    area = np.bincount(flat, minlength=n + 1)
    mass = np.bincount(flat, weights=probs.ravel(), minlength=n + 1)
    map_of = np.bincount(flat, weights=np.repeat(np.arange(len(mask)), mask[0].size), minlength=n + 1)
    good = (area >= max(int(min_region), 1)) & (mass > 0)
    good[0] = False
    return np.bincount((map_of[good] / area[good]).round().astype(np.int64), minlength=len(mask)).astype(np.int64)


def finish_counts(probs: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, min_region: int,
                  steps: int = 12) -> torch.Tensor:
    """Rounds until the labelling settles (one host check per ``steps`` rounds), then the counts."""
    settled = torch.zeros((), dtype=torch.bool)
    while not bool(settled):
        labels, settled = label_rounds(labels, mask.to(torch.float32), steps)
    return _counts(probs, labels, mask, min_region)


def _counts(probs: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, min_region: int) -> torch.Tensor:
    n, h, w = labels.shape
    key = (torch.arange(n, device=labels.device)[:, None, None] * (h * w + 1) + labels.long())[mask]
    area = torch.zeros(n * (h * w + 1), dtype=torch.float64, device=labels.device)
    area.index_add_(0, key, torch.ones_like(key, dtype=torch.float64))
    mass = torch.zeros_like(area).index_add_(0, key, probs[mask].to(torch.float64))
    good = (area >= max(int(min_region), 1)) & (mass > 0)
    return good.reshape(n, h * w + 1)[:, 1:].sum(dim=1)
