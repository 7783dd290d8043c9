"""Synthetic grounding set: a few coloured shapes per image, one of them named by the phrase ("the red circle").

Shapes are drawn with ``countboard.counting.datasets.synthetic_shapes.draw_objects``; every image holds objects of distinct
classes, so the phrase names exactly one object and its box is the ground truth. Deterministic: sample ``k``
depends only on ``(seed, k)``; nothing is written to disk.
"""

from __future__ import annotations

import numpy as np

from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES, draw_objects
from countboard.errors import ConfigError
from countboard.grounding.datasets.public import GroundingDataset, GroundingSample


def singular(class_name: str) -> str:
    """``"red circles"`` → ``"red circle"``, ``"purple crosses"`` → ``"purple cross"``.

    Example:
        >>> singular("purple crosses"), singular("cyan diamonds")
        ('purple cross', 'cyan diamond')
    """
    if class_name.endswith("sses"):
        return class_name[:-2]
    return class_name[:-1] if class_name.endswith("s") else class_name


def _place(n: int, size: tuple[int, int], diam: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``(n, 2)`` centres ``(x, y)`` with objects inside the image and not touching (rejection sampling)."""
    h, w = size
    centres: list[tuple[float, float]] = []
    for k in range(n):
        r = diam[k] / 2 + 2
        for _ in range(500):
            c = (rng.uniform(r, w - r), rng.uniform(r, h - r))
            if all(np.hypot(c[0] - q[0], c[1] - q[1]) > r + diam[j] / 2 + 4 for j, q in enumerate(centres)):
                break
        else:
            raise ConfigError(f"cannot place {n} shapes of {diam.max():.0f} px in a {h}x{w} image without "
                              "overlap; lower dataset.objects_range or dataset.size_range")
        centres.append(c)
    return np.array(centres)


def make_sample(k: int, seed: int, image_size: tuple[int, int], objects_range: tuple[int, int],
                size_range: tuple[float, float], classes: list[str]) -> GroundingSample:
    """Sample ``k``: background with mild noise, ``objects_range`` shapes of distinct classes, one target."""
    rng = np.random.default_rng([seed, k])
    h, w = image_size
    n = int(rng.integers(objects_range[0], objects_range[1] + 1))
    picked = [classes[i] for i in rng.choice(len(classes), size=n, replace=False)]
    diam = rng.uniform(size_range[0], size_range[1], size=n)
    centres = _place(n, (h, w), diam, rng)
    base = np.array([236, 232, 222], dtype=np.float64) + rng.integers(-12, 13, size=3)
    canvas = np.clip(base + rng.normal(0, 5, size=(h, w, 1)), 0, 255).astype(np.uint8)
    boxes = [draw_objects(canvas, cls, centres[i:i + 1], diam[i], rng)[0] for i, cls in enumerate(picked)]
    t = int(rng.integers(n))
    y0, x0, y1, x1 = (float(v) for v in boxes[t])
    box = (max(y0, 0.0), max(x0, 0.0), min(y1, float(h)), min(x1, float(w)))
    return GroundingSample(sample_id=f"g{k:05d}", phrase=f"the {singular(picked[t])}", box=box, image=canvas,
                           meta={"class_name": picked[t], "n_objects": n})


class SyntheticGrounding(GroundingDataset):
    """``n_samples`` generated grounding samples (see module docstring).

    Args:
        n_samples: Number of images (one phrase each).
        image_size: ``(H, W)``.
        seed: Generator seed.
        objects_range: Inclusive range of shapes per image (distinct classes).
        size_range: Shape diameters in pixels.
        n_classes: Use the first N classes of ``SHAPE_CLASSES``.
        max_samples: Keep only the first N samples.

    Example:
        >>> ds = SyntheticGrounding(n_samples=2, image_size=(96, 96), size_range=(16, 24))
        >>> ds[ds.ids()[0]].phrase.startswith("the ")
        True
    """

    name = "synthetic_grounding"

    def __init__(self, n_samples: int = 40, image_size: tuple[int, int] = (224, 224), seed: int = 0,
                 objects_range: tuple[int, int] = (2, 4), size_range: tuple[float, float] = (28.0, 56.0),
                 n_classes: int = 10, max_samples: int | None = None):
        classes = list(SHAPE_CLASSES)[:n_classes]
        lo, hi = (int(v) for v in objects_range)
        if not 1 <= lo <= hi <= len(classes):
            raise ConfigError(f"dataset.objects_range={list(objects_range)} must lie within 1..{len(classes)} "
                              "(objects in one image have distinct classes)")
        size = (int(image_size[0]), int(image_size[1]))
        samples = [make_sample(k, seed, size, (lo, hi), (float(size_range[0]), float(size_range[1])), classes)
                   for k in range(min(n_samples, max_samples or n_samples))]
        super().__init__(samples)
