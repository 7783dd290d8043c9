"""Items that flow from datasets to models."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ImageItem:
    """One image with whatever annotation the dataset has.

    Attributes:
        image_id: Stable id (file name for FSC-147).
        image: ``(H, W, 3)`` uint8 RGB array.
        points: Object centres per class name, each ``(K, 2)`` float array of ``(x, y)`` pixel coordinates.
            Mosaics carry the points of both halves. Empty when the dataset has no point annotations.
        boxes: Exemplar or object boxes per class name, each ``(K, 4)`` array of ``(y0, x0, y1, x1)``.
        class_name: The image's own (positive) class, when it has one.
    """

    image_id: str
    image: np.ndarray
    points: dict[str, np.ndarray] = field(default_factory=dict)
    boxes: dict[str, np.ndarray] = field(default_factory=dict)
    class_name: str | None = None

    @property
    def size(self) -> tuple[int, int]:
        return int(self.image.shape[0]), int(self.image.shape[1])
