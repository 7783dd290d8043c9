"""The one image decoder of every loader: a file (path, bytes or open image) to the ``(H, W, 3)`` uint8 RGB array
of the picture it holds.

Rules (docs/counters.md, "How images are decoded"):

- **Range, not clipping.** Each sample type is scaled to 0..255 by its nominal range, rounded to the nearest
  level: 8-bit as is; 16-bit (``I;16``, ``I;16B``, ``I;16L``, ``I;16N``, 48-bit RGB, which Pillow reduces to its
  high bytes itself) by 65535; ``I`` (32-bit signed, how Pillow opens 16-bit PNG and TIFF greyscale) by 65535 when
  every value lies in 0..65535, else by the whole int32 range; ``F`` (32-bit float) by 0..1 when every value lies
  there (the convention of float images), else by its own minimum and maximum (a float file declares no range).
  ``convert("RGB")`` would clip ``I;16`` and ``I`` to 255 (a white image) and truncate ``F``.
- **Transparency** (``LA``, ``RGBA``, ``PA``, ``P`` or ``L`` with a transparent colour) is composited over white,
  as a viewer shows the file; an opaque image is unchanged.
- **Orientation**: the EXIF ``Orientation`` tag is not applied. The reference loaders of the field (FSC-147's
  ``LearningToCountEverything``, CountGD, PrACo) read the stored pixels with ``Image.open(...)``, and the point
  annotations of FSC-147, PairTally and PrACo++ are in the stored pixels' coordinates.
- Other modes (``CMYK``, ``YCbCr``, ``1``, ``RGBX``, ...) go through Pillow's own conversion to RGB. A mode with
  no conversion, non-finite float samples, or a file Pillow cannot read raises ``ValueError`` / ``OSError``, which
  the engine records as the unit's failure.

Example:
    >>> from PIL import Image
    >>> deep = Image.fromarray(np.full((2, 2), 65535, dtype=np.uint16))  # mode I;16, all white
    >>> rgb_array(Image.fromarray(np.full((2, 2), 32896, dtype=np.uint16)))[0, 0].tolist()
    [128, 128, 128]
    >>> rgb_array(deep)[0, 0].tolist()
    [255, 255, 255]
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from PIL import Image

SIXTEEN_BIT = ("I;16", "I;16L", "I;16B", "I;16N")
#: Modes composited over white (their alpha band is the last).
WITH_ALPHA = ("LA", "La", "RGBA", "RGBa", "PA")
#: A point further than this outside the decoded image (in pixels) fails its unit: annotations put points on
#: pixel centres or corners, so a point on the last pixel may lie up to one pixel past the edge.
POINT_SLACK = 1.0


def decode_image(source: str | Path | bytes | Any, name: str | None = None) -> np.ndarray:
    """The ``(H, W, 3)`` uint8 RGB picture of an image file (a path, its bytes, or a readable binary file).

    Raises ``OSError`` (missing, truncated, not an image) or ``ValueError`` (a mode that cannot be shown), with
    ``name`` (default: the path) in the message.
    """
    from PIL import Image

    label = name or (str(source) if isinstance(source, (str, Path)) else "image")
    fh = io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview)) else source
    try:
        with Image.open(fh) as img:
            img.load()
            return rgb_array(img)
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}") from exc
    except Image.DecompressionBombError as exc:
        raise ValueError(f"{label}: {exc}") from exc


def rgb_array(img: Image.Image) -> np.ndarray:
    """An open Pillow image as ``(H, W, 3)`` uint8 RGB by the module's rules (range, transparency, no EXIF)."""
    mode = img.mode
    if mode == "RGB":
        return np.asarray(img, dtype=np.uint8)
    if mode in SIXTEEN_BIT or mode in ("I", "F"):
        return _grey(_scaled(np.asarray(img), mode))
    if mode in WITH_ALPHA or (mode in ("P", "L", "RGB", "1") and "transparency" in img.info):
        rgba = np.asarray(img.convert("RGBA"), dtype=np.float64)
        alpha = rgba[..., 3:] / 255.0
        return np.rint(rgba[..., :3] * alpha + 255.0 * (1.0 - alpha)).astype(np.uint8)
    try:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)
    except (ValueError, OSError) as exc:
        raise ValueError(f"images of mode {mode!r} cannot be converted to RGB ({exc}); save it as 8-bit RGB") from exc


def to_pil(img: Image.Image) -> Image.Image:
    """An open Pillow image as an RGB Pillow image by the same rules (for models that take Pillow images)."""
    from PIL import Image

    return img if img.mode == "RGB" else Image.fromarray(rgb_array(img))


def _scaled(values: np.ndarray, mode: str) -> np.ndarray:
    """Samples of a one-band deep mode scaled to 0..255 by their range (see the module docstring)."""
    data = values.astype(np.float64)
    if mode == "F":
        if not np.isfinite(data).all():
            raise ValueError("a float (mode 'F') image holds NaN or infinite samples")
        lo, hi = (0.0, 1.0) if data.size == 0 or (data.min() >= 0.0 and data.max() <= 1.0) else \
            (float(data.min()), float(data.max()))
    elif mode == "I" and data.size and (data.min() < 0 or data.max() > 65535):
        lo, hi = -(2.0 ** 31), 2.0 ** 31 - 1
    else:
        lo, hi = 0.0, 65535.0
    span = hi - lo if hi > lo else 1.0
    return np.rint((data - lo) * (255.0 / span)).clip(0, 255).astype(np.uint8)


def _grey(band: np.ndarray) -> np.ndarray:
    return np.repeat(band[..., None], 3, axis=2)


def check_points(points: Mapping[str, np.ndarray], size: tuple[int, int], image_id: str) -> None:
    """Raise ``ValueError`` naming the image, the class and the first point that lies outside the decoded image
    (more than ``POINT_SLACK`` pixels past an edge); points are ``(x, y)``, ``size`` is ``(H, W)``.

    Example:
        >>> check_points({"cat": np.array([[10.0, 5.0]])}, (20, 30), "a.jpg")
        >>> check_points({"cat": np.array([[40.0, 5.0]])}, (20, 30), "a.jpg")
        Traceback (most recent call last):
        ...
        ValueError: a.jpg: point (40, 5) of 'cat' is outside the 30 x 20 image (W x H); check its annotation
    """
    h, w = size
    for class_name, pts in points.items():
        arr = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        bad = ~np.isfinite(arr).all(axis=1) | (arr[:, 0] < -POINT_SLACK) | (arr[:, 1] < -POINT_SLACK) \
            | (arr[:, 0] > w + POINT_SLACK) | (arr[:, 1] > h + POINT_SLACK)
        if bad.any():
            x, y = arr[int(np.flatnonzero(bad)[0])]
            raise ValueError(f"{image_id}: point ({x:g}, {y:g}) of {class_name!r} is outside the {w} x {h} image "
                             "(W x H); check its annotation")
