"""Non-neural grounding references: what a perfect and a blind model score on the Q-GroundCAM metrics.

``BoxOracle`` reads the ground-truth box (an upper bound, never a model result) and ``CenterPrior`` ignores image
and phrase (the centre bias every dataset has). Both give meaningful leaderboard rows without any download.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import numpy as np

from countboard.grounding.datasets.public import GroundingSample
from countboard.models.base import GroundingModel


def gaussian_map(size: tuple[int, int], centre: tuple[float, float], sigma: tuple[float, float]) -> np.ndarray:
    """``(H, W)`` float32 Gaussian with peak 1 at ``centre = (cy, cx)`` and per-axis ``sigma = (sy, sx)``.

    Example:
        >>> m = gaussian_map((5, 5), (2.0, 2.0), (1.0, 1.0))
        >>> float(m[2, 2]), round(float(m[2, 3]), 4)
        (1.0, 0.6065)
    """
    h, w = size
    yy = (np.arange(h, dtype=np.float64) - centre[0]) / max(sigma[0], 1e-6)
    xx = (np.arange(w, dtype=np.float64) - centre[1]) / max(sigma[1], 1e-6)
    return np.exp(-0.5 * (yy[:, None] ** 2 + xx[None, :] ** 2)).astype(np.float32)


def _image_size(sample: GroundingSample) -> tuple[int, int]:
    shape = sample.meta.get("image_size") or sample.load_image().shape[:2]
    return int(shape[0]), int(shape[1])


class GaussianReference(GroundingModel):
    """A reference map per sample: one Gaussian whose centre and sigma ``_gaussian`` derives from the sample.

    It reads the image only for a sample that does not declare its ``image_size``.
    """

    reads_pixels = False

    @abstractmethod
    def _gaussian(self, sample: GroundingSample, size: tuple[int, int]
                  ) -> tuple[tuple[float, float], tuple[float, float]]:
        """``(centre, sigma)`` of ``sample``'s map, both ``(y, x)`` in pixels; ``size`` is the image's ``(H, W)``."""

    def heatmaps(self, samples: Sequence[GroundingSample]) -> list[np.ndarray]:
        out = []
        for s in samples:
            size = _image_size(s)
            out.append(gaussian_map(size, *self._gaussian(s, size)))
        return out


class BoxOracle(GaussianReference):
    """A Gaussian centred on the true box, ``spread`` × its height/width as sigma (reads the annotation)."""

    explainer_method = "box_oracle"

    def __init__(self, spread: float = 0.25, device: str = "cpu"):
        super().__init__(device)
        self.spread = float(spread)

    def explainer_detail(self) -> str:
        return f"reference map from the ground-truth box (sigma {self.spread} x box size), not a model"

    def _gaussian(self, sample: GroundingSample, size: tuple[int, int]
                  ) -> tuple[tuple[float, float], tuple[float, float]]:
        y0, x0, y1, x1 = sample.box
        return ((y0 + y1 - 1) / 2, (x0 + x1 - 1) / 2), (self.spread * (y1 - y0), self.spread * (x1 - x0))


class CenterPrior(GaussianReference):
    """A Gaussian at the image centre, ``sigma_frac`` × image height/width as sigma (ignores image and phrase)."""

    explainer_method = "center_prior"

    def __init__(self, sigma_frac: float = 0.25, device: str = "cpu"):
        super().__init__(device)
        self.sigma_frac = float(sigma_frac)

    def explainer_detail(self) -> str:
        return f"reference map at the image centre (sigma {self.sigma_frac} x image size), not a model"

    def _gaussian(self, sample: GroundingSample, size: tuple[int, int]
                  ) -> tuple[tuple[float, float], tuple[float, float]]:
        h, w = size
        return ((h - 1) / 2, (w - 1) / 2), (self.sigma_frac * h, self.sigma_frac * w)
