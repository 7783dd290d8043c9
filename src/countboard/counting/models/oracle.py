"""Oracle counter: reads the answer from the annotations (the upper bound of every prompt-aware metric)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from countboard.counting.datasets.mosaic import points_to_density
from countboard.items import ImageItem
from countboard.models.base import CountedMap, Counter, check_one_prompt_each


def normalise_class(name: str) -> str:
    """Class names compare case- and space-insensitively (``"Red  Circles"`` matches ``"red circles"``)."""
    return " ".join(str(name).lower().split())


class OracleCounter(Counter):
    """Unit mass at each annotated point of the prompted class; a zero map when the class is absent.

    Its features are the ``ImageItem`` themselves (the default ``encode_images``), so it needs items that carry
    point annotations, or annotated counts without points (``ImageItem.counts``: then the map is empty and its
    count is the annotated one); on an item without either it counts 0 for every prompt.

    Example:
        >>> item = ImageItem("a", np.zeros((8, 8, 3), np.uint8), {"cats": np.array([[1.0, 2.0], [5.0, 5.0]])})
        >>> OracleCounter().count([item, item], ["cats", "dogs"]).tolist()
        [2.0, 0.0]
    """

    @staticmethod
    def _points(item: ImageItem, prompt: str) -> np.ndarray:
        wanted = normalise_class(prompt)
        pts = [np.asarray(p).reshape(-1, 2) for c, p in item.points.items() if normalise_class(c) == wanted]
        return np.concatenate(pts) if pts else np.zeros((0, 2))

    @staticmethod
    def _annotated_count(item: ImageItem, prompt: str) -> float | None:
        """The annotated count of the prompted class where the item has counts but no points of it."""
        wanted = normalise_class(prompt)
        if any(normalise_class(c) == wanted for c in item.points):
            return None
        found = [float(v) for c, v in item.counts.items() if normalise_class(c) == wanted]
        return found[0] if found else None

    def decode(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> list[np.ndarray]:
        check_one_prompt_each(features, prompts)
        out = []
        for item, prompt in zip(features, prompts, strict=True):
            known = self._annotated_count(item, prompt)
            density = points_to_density(self._points(item, prompt), item.size)
            out.append(density if known is None else CountedMap(density, known))
        return out

    def detect(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """The annotated object boxes of the prompted class (``ImageItem.object_boxes``), each with score 1: the
        upper bound of detection AP; no box where the item has none of the class.

        Example:
            >>> item = ImageItem("a", np.zeros((8, 8, 3), np.uint8), object_boxes={"cats": np.array([[0, 0, 4, 4]])})
            >>> [(b.tolist(), s.tolist()) for b, s in OracleCounter().detect([item, item], ["Cats", "dogs"])]
            [([[0.0, 0.0, 4.0, 4.0]], [1.0]), ([], [])]
        """
        check_one_prompt_each(features, prompts)
        out = []
        for item, prompt in zip(features, prompts, strict=True):
            wanted = normalise_class(prompt)
            boxes = [np.asarray(b, np.float64).reshape(-1, 4) for c, b in item.object_boxes.items()
                     if normalise_class(c) == wanted]
            boxes = np.concatenate(boxes) if boxes else np.zeros((0, 4))
            out.append((boxes, np.ones(len(boxes))))
        return out

    def decode_counts(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> np.ndarray:
        """The number of annotated points of the prompted class (every point has unit mass in ``decode``'s map),
        or its annotated count where the item has counts but no points."""
        check_one_prompt_each(features, prompts)
        out = []
        for item, prompt in zip(features, prompts, strict=True):
            known = self._annotated_count(item, prompt)
            out.append(len(self._points(item, prompt)) if known is None else known)
        return np.array(out, dtype=np.float64)
