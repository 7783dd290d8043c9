"""Text-to-image generators: prompts × seeds → images, in batches.

A generator implements ``generate_batch`` for aligned lists of prompts and seeds; ``generate`` walks the product
of a prompt set and a seed list in batches of ``batch_size``. Image ids follow GeckoNum's file names,
``<prefix>_<prompt_id:05d>_<seed>``, so generated images, imported annotations and the annotation page's export
share one key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from countboard.data.prompts import PromptSpec


def image_id(prompt_id: int, seed: int, prefix: str = "geckonum") -> str:
    """GeckoNum-style image id.

    Example:
        >>> image_id(42, 3)
        'geckonum_00042_3'
    """
    return f"{prefix}_{int(prompt_id):05d}_{int(seed)}"


@dataclass
class GeneratedImage:
    """One generated image.

    Attributes:
        prompt: The prompt it was generated from.
        seed: The generation seed.
        image: ``(H, W, 3)`` uint8 RGB.
        drawn_counts: Objects actually drawn per noun, when the generator knows them (procedural); else None.
        meta: Anything else the generator knows, e.g. ``points`` (object centres per class name, procedural).
    """

    prompt: PromptSpec
    seed: int
    image: np.ndarray
    drawn_counts: dict[str, int] | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def image_id(self) -> str:
        return image_id(self.prompt.prompt_id, self.seed)


class Generator(ABC):
    """Base class of text-to-image generators."""

    kind = "generator"

    def __init__(self, device: str = "cpu", batch_size: int = 4):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.device = device
        self.batch_size = int(batch_size)

    @abstractmethod
    def generate_batch(self, prompts: Sequence[PromptSpec], seeds: Sequence[int]) -> list[GeneratedImage]:
        """Images for the pairs ``(prompts[i], seeds[i])``; the same pair always gives the same image."""

    def generate(self, prompts: Sequence[PromptSpec], seeds: Sequence[int]) -> Iterator[GeneratedImage]:
        """Images for every prompt × seed (prompt-major order), ``batch_size`` pairs per call of the backend."""
        pairs = [(p, int(s)) for p in prompts for s in seeds]
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            yield from self.generate_batch([p for p, _ in chunk], [s for _, s in chunk])
