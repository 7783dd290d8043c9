"""Class-blind counter: counts every annotated object whatever the prompt (the baseline PrACo must expose)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from countboard.counting.datasets.mosaic import points_to_density
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each


class ClassBlindCounter(Counter):
    """Unit mass at every annotated point of every class, ignoring the prompt.

    A perfect counter that does not read the prompt: its classic metrics are perfect on single-class images, its
    NMN is 1 and its mosaic precision drops with the distractor count.

    Example:
        >>> item = ImageItem("a", np.zeros((8, 8, 3), np.uint8),
        ...                  {"cats": np.array([[1.0, 2.0]]), "dogs": np.array([[5.0, 5.0]])})
        >>> ClassBlindCounter().count([item, item], ["cats", "zebras"]).tolist()
        [2.0, 2.0]
    """

    def decode(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> list[np.ndarray]:
        check_one_prompt_each(features, prompts)
        return [points_to_density(item.all_points, item.size) for item in features]

    def decode_counts(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> np.ndarray:
        """The number of annotated points of every class (unit mass each in ``decode``'s map)."""
        check_one_prompt_each(features, prompts)
        return np.array([len(np.asarray(item.all_points).reshape(-1, 2)) for item in features], dtype=np.float64)
