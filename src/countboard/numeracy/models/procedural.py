"""A procedural "text-to-image generator" with a configurable numeracy error model, for offline comparisons.

It draws each entity of an exact-count prompt as objects of a synthetic-shapes class (the prompt's noun, e.g.
"red circle", is the singular of a class name, e.g. "red circles") with ``render_scene``. How many it draws
follows ``NumeracyErrors``: the chance of drawing the asked number falls with the number, most misses are off by
one, some entities are left out, and in multi-entity prompts the counts of two entities may be swapped (a
number-binding error). The counts actually drawn are returned with each image, so an evaluator's judgement can be
checked against the truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES, SceneStyle, render_scene
from countboard.errors import ConfigError
from countboard.items import GeneratedImage
from countboard.models.base import Generator
from countboard.numeracy.datasets.prompts import PromptSpec, plural


def drawable_nouns() -> list[str]:
    """Singular nouns the procedural generator can draw (one per synthetic-shapes class)."""
    from countboard.numeracy.datasets.prompts import singular

    return [singular(c) for c in SHAPE_CLASSES]


@dataclass(frozen=True)
class NumeracyErrors:
    """How a procedural generator misses numbers.

    Attributes:
        accuracy: Probability of drawing exactly the asked number 1.
        decay: Drop of that probability per unit of the number (``accuracy - decay * (n - 1)``).
        floor: Lowest probability of an exact count, however large the number.
        off_by_one: Share of misses that are one too many or one too few.
        overshoot: Share of misses that draw too many (the rest too few).
        omission: Probability that an entity is not drawn at all.
        binding: Probability that a multi-entity prompt gets the counts of two of its entities swapped.
        max_count: Most objects drawn for one entity.
    """

    accuracy: float = 0.95
    decay: float = 0.05
    floor: float = 0.1
    off_by_one: float = 0.7
    overshoot: float = 0.6
    omission: float = 0.02
    binding: float = 0.05
    max_count: int = 15

    def __post_init__(self) -> None:
        for name in ("accuracy", "floor", "off_by_one", "overshoot", "omission", "binding"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"procedural generator: {name}={value} must be in [0, 1]")

    def p_exact(self, n: int) -> float:
        """Probability of drawing exactly ``n`` (before omissions and binding errors).

        Example:
            >>> NumeracyErrors(accuracy=0.9, decay=0.1, floor=0.2).p_exact(3)
            0.7
        """
        return float(np.clip(self.accuracy - self.decay * (n - 1), self.floor, 1.0))

    def draw_count(self, n: int, rng: np.random.Generator) -> int:
        """The number drawn for an entity that asks for ``n``."""
        if rng.random() < self.omission:
            return 0
        if rng.random() < self.p_exact(n):
            return n
        up = rng.random() < self.overshoot or n <= 1
        size = 1 if rng.random() < self.off_by_one else 1 + int(rng.geometric(0.4))
        return int(np.clip(n + size if up else n - size, 0, self.max_count))

    def draw_counts(self, counts: dict[str, int], rng: np.random.Generator) -> dict[str, int]:
        """Counts drawn for all entities of a prompt."""
        drawn = {noun: self.draw_count(n, rng) for noun, n in counts.items()}
        nouns = list(drawn)
        if len(nouns) > 1 and rng.random() < self.binding:
            i, j = rng.choice(len(nouns), size=2, replace=False)
            drawn[nouns[i]], drawn[nouns[j]] = drawn[nouns[j]], drawn[nouns[i]]
        return drawn


class ProceduralGenerator(Generator):
    """Renders exact-count prompts over synthetic-shapes nouns with ``NumeracyErrors``.

    Args:
        image_size: Side of the square images in pixels.
        clutter: Background clutter of the scenes (``SceneStyle.clutter``).
        salt: Mixed into every image's random stream, so two configurations with the same errors differ.
        **errors: Fields of ``NumeracyErrors``.
    """

    def __init__(self, image_size: int = 192, clutter: float = 0.2, salt: int = 0, device: str = "cpu",
                 batch_size: int = 16, **errors: float):  # fmt: skip
        super().__init__(device=device, batch_size=batch_size)
        self.size = (int(image_size), int(image_size))
        self.style = SceneStyle(clutter=clutter)
        self.salt = int(salt)
        try:
            self.errors = NumeracyErrors(**errors)
        except TypeError as exc:
            fields = ", ".join(NumeracyErrors.__dataclass_fields__)
            raise ConfigError(f"procedural generator: {exc}; error-model keys are {fields}") from exc

    def _classes(self, spec: PromptSpec) -> dict[str, str]:
        if not spec.exact:
            raise ValueError(f"prompt {spec.prompt_id} ({spec.prompt_type}) has no exact counts to draw")
        out = {}
        for e in spec.entities:
            cls = plural(e.noun)
            if cls not in SHAPE_CLASSES:
                raise ValueError(f"prompt {spec.prompt_id}: cannot draw {e.noun!r}; drawable nouns: "
                                 f"{', '.join(drawable_nouns())}")  # fmt: skip
            out[e.noun] = cls
        return out

    def generate_batch(self, prompts: Sequence[PromptSpec], seeds: Sequence[int]) -> list[GeneratedImage]:
        out = []
        for spec, seed in zip(prompts, seeds, strict=True):
            classes = self._classes(spec)
            rng = np.random.default_rng([self.salt, int(spec.prompt_id), int(seed)])
            drawn = self.errors.draw_counts(spec.counts, rng)
            scene = render_scene({classes[n]: c for n, c in drawn.items()}, self.size, rng, self.style)
            out.append(GeneratedImage(spec, int(seed), scene.image, drawn, {"points": scene.points}))
        return out
