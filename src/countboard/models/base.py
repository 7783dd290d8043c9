"""Model interfaces shared by tasks.

Counters map (image, prompt) pairs to density maps whose sum is the count. A counter that can encode an image once
and decode many prompts overrides ``encode_images`` and ``decode``; tasks that prompt one image with many classes
(the negative-label test) call ``encode_images`` once per image and ``decode`` with all prompts of that image.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from countboard.data.base import ImageItem


class Counter(ABC):
    """Prompt-based class-agnostic counter.

    Subclasses implement ``decode``; those with an expensive image encoder also override ``encode_images`` so its
    output is reused across prompts.
    """

    kind = "counter"
    #: True when ``encode_images`` does real work worth caching (image backbone features).
    caches_image_features: bool = False

    def __init__(self, device: str = "cpu"):
        self.device = device

    def encode_images(self, items: Sequence[ImageItem]) -> list[Any]:
        """Per-image features to reuse across prompts; the default keeps the items themselves."""
        return list(items)

    @abstractmethod
    def decode(self, features: Sequence[Any], prompts: Sequence[str]) -> list[np.ndarray]:
        """Density maps for pairs ``(features[i], prompts[i])``: each ``(H, W)`` float32 at image resolution."""

    def density(self, items: Sequence[ImageItem], prompts: Sequence[str]) -> list[np.ndarray]:
        """Density maps of ``items[i]`` prompted with ``prompts[i]`` (encode then decode)."""
        if len(items) != len(prompts):
            raise ValueError(f"{len(items)} images but {len(prompts)} prompts: pass one prompt per image")
        return self.decode(self.encode_images(items), prompts)

    def count(self, items: Sequence[ImageItem], prompts: Sequence[str]) -> np.ndarray:
        """Counts (density map sums) of ``items[i]`` prompted with ``prompts[i]``."""
        return np.array([float(m.sum()) for m in self.density(items, prompts)])


def boxes_to_density(boxes: np.ndarray, scores: np.ndarray | None, size: tuple[int, int]) -> np.ndarray:
    """Density map with unit mass at each box centre (detect-then-count models).

    Args:
        boxes: ``(K, 4)`` boxes ``(y0, x0, y1, x1)`` in pixels.
        scores: Optional ``(K,)`` weights (defaults to 1 each).
        size: ``(H, W)`` of the map.

    Example:
        >>> boxes_to_density(np.array([[0, 0, 4, 4]]), None, (8, 8)).sum()
        1.0
    """
    h, w = size
    out = np.zeros((h, w), dtype=np.float32)
    if len(boxes) == 0:
        return out
    boxes = np.asarray(boxes, dtype=np.float64)
    cy = np.clip(((boxes[:, 0] + boxes[:, 2]) / 2).astype(int), 0, h - 1)
    cx = np.clip(((boxes[:, 1] + boxes[:, 3]) / 2).astype(int), 0, w - 1)
    weights = np.ones(len(boxes)) if scores is None else np.asarray(scores, dtype=np.float64)
    np.add.at(out, (cy, cx), weights.astype(np.float32))
    return out
