"""Image preprocessing as batched tensor ops on the model's device, equal to the transformers processors'.

The processors of transformers' PIL backend resize each image on the host, one at a time: ``ViTImageProcessor``
(CLIPSeg) through PIL's bilinear filter on ``uint8`` pixels, ``Owlv2ImageProcessor`` through scipy (a Gaussian
anti-aliasing filter and a linear zoom, about 0.24 s per image at 960 px on a loaded CPU). Here the same operators
run on a ``(B, 3, H, W)`` tensor of same-size images on the model's device:

- :func:`pil_bilinear_resize` reproduces the fixed-point arithmetic of Pillow's ``Resample.c`` (integer filter
  coefficients with 22 fractional bits, the horizontal pass rounded to ``uint8`` before the vertical one), with
  exact whole-number sums. On the sizes of the tests' fixtures and of the benchmarks (e.g. 256 x 256 to 64 x 64 or
  352 x 352) :func:`vit_pixel_values` equals the processor's ``pixel_values`` **bit for bit**. For some other
  size pairs, where both axes are resampled, the installed Pillow wheel differs from that reference code by one
  ``uint8`` level at a few per cent of the pixels (``tests/models/test_preprocess.py`` bounds it at one level).
- :func:`owlv2_pixel_values` applies scipy's Gaussian filter (mirror boundary, radius ``int(4 sigma + 0.5)``)
  followed by its linear zoom (``grid_mode=True``, mirror boundary) as one float64 matrix per axis, multiplied in
  float32. scipy accumulates in float64 and stores float32 after each step; the two differ by float rounding only (|difference| <= 1e-5 after normalisation, where one ``uint8``
  level is 1.5e-2; ``tests/models/test_preprocess.py``).

Both run with autocast off (a ``bf16`` job still gets fp32 pixels, as from the processor). A processor whose
settings these functions do not reproduce (another resample filter, a shortest-edge resize, a centre crop) is
called as it is, on the host.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch

#: Fractional bits of PIL's 8-bit resampling coefficients (``PRECISION_BITS`` of libImaging/Resample.c).
PIL_PRECISION_BITS = 32 - 8 - 2
_PIL_BILINEAR = 2


@functools.lru_cache(maxsize=64)
def pil_bilinear_coefficients(in_size: int, out_size: int) -> np.ndarray:
    """``(out_size, in_size)`` integer coefficients of PIL's bilinear resampling along one axis (as float64).

    Follows ``precompute_coeffs`` and ``normalize_coeffs_8bpc`` of Pillow's ``Resample.c``: the triangle filter is
    widened by the downscaling factor (antialiasing), each row is normalised in double precision and rounded to
    ``PIL_PRECISION_BITS`` fractional bits.

    Example:
        >>> (pil_bilinear_coefficients(4, 2) / 2**22).round(3).tolist()
        [[0.429, 0.429, 0.143, 0.0], [0.0, 0.143, 0.429, 0.429]]
    """
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = filterscale  # the bilinear filter's support is 1
    one = float(1 << PIL_PRECISION_BITS)
    out = np.zeros((out_size, in_size), dtype=np.float64)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        weights = []
        total = 0.0
        for x in range(xmax):
            w = max(0.0, 1.0 - abs((x + xmin - center + 0.5) / filterscale))
            weights.append(w)
            total += w
        for x, w in enumerate(weights):
            k = w / total if total != 0.0 else w
            out[xx, xmin + x] = int(-0.5 + k * one) if k < 0 else int(0.5 + k * one)
    return out


@functools.lru_cache(maxsize=128)
def _matrix(in_size: int, out_size: int, builder, device: str, dtype: torch.dtype) -> torch.Tensor:
    """``builder(in_size, out_size)`` transposed, as a tensor on ``device`` (kept between batches)."""
    return torch.from_numpy(np.ascontiguousarray(builder(in_size, out_size).T)).to(device=device, dtype=dtype)


def resample_last(x: torch.Tensor, out_size: int, builder) -> torch.Tensor:
    """``x @ builder(n, out_size).T`` along the last axis of ``x`` (in ``x``'s dtype, on ``x``'s device)."""
    return x @ _matrix(x.shape[-1], out_size, builder, str(x.device), x.dtype)


#: Coefficients are split as ``hi * 2**_SPLIT + lo`` so that float32 products sum exactly (see ``_pil_pass``).
_SPLIT = 10


def _pil_hi(in_size: int, out_size: int) -> np.ndarray:
    return np.floor(pil_bilinear_coefficients(in_size, out_size) / 2**_SPLIT)


def _pil_lo(in_size: int, out_size: int) -> np.ndarray:
    k = pil_bilinear_coefficients(in_size, out_size)
    return k - np.floor(k / 2**_SPLIT) * 2**_SPLIT


def _pil_pass(x: torch.Tensor, out_size: int) -> torch.Tensor:
    """One PIL pass along the last axis of ``x`` (whole values 0..255, float32): sum, round, clip to 0..255.

    PIL sums ``pixel * coefficient`` in 32-bit integers. Here each coefficient is split in a high and a low part
    of at most 12 and 10 bits, so every partial sum of either product stays a whole number below ``2**24`` (for up
    to 64 taps, a 30x reduction) and float32 matrix products compute both exactly; the parts are joined in
    float64. Larger reductions are summed in float64 directly.
    """
    n = x.shape[-1]
    if 2 * math.ceil(n / out_size) + 1 > 64:
        acc = resample_last(x.to(torch.float64), out_size, pil_bilinear_coefficients)
    else:
        hi = resample_last(x, out_size, _pil_hi).to(torch.float64)
        acc = hi * float(2**_SPLIT) + resample_last(x, out_size, _pil_lo).to(torch.float64)
    acc += float(1 << (PIL_PRECISION_BITS - 1))
    return torch.floor(acc / float(1 << PIL_PRECISION_BITS)).clamp_(0, 255).to(torch.float32)


def pil_bilinear_resize(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``(B, C, H, W)`` uint8 images resized to ``size = (h, w)`` as ``PIL.Image.resize(..., BILINEAR)`` does.

    Returns float32 with whole values 0..255 (PIL's ``uint8`` result). Two passes, the first rounded to ``uint8``:
    horizontal first unless the vertical pass leaves fewer pixels (PIL's order); an axis whose size does not
    change is not resampled.
    """
    x = images.to(torch.float32).contiguous()
    h, w = int(size[0]), int(size[1])
    if x.shape[-1] != w:
        x = _pil_pass(x, w)
    if x.shape[-2] != h:
        x = _pil_pass(x.transpose(-1, -2), h).transpose(-1, -2)
    return x


def images_tensor(images: Sequence[np.ndarray], device: str | torch.device) -> torch.Tensor:
    """Same-size ``(H, W, 3)`` uint8 arrays as one ``(B, 3, H, W)`` uint8 tensor on ``device``."""
    stacked = torch.from_numpy(np.ascontiguousarray(np.stack([np.asarray(im) for im in images])))
    return stacked.to(device).permute(0, 3, 1, 2)


def by_size(images: Sequence[np.ndarray]) -> dict[tuple[int, int], list[int]]:
    """Indices of ``images`` grouped by ``(H, W)``, in order of first appearance."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, im in enumerate(images):
        groups.setdefault(tuple(np.shape(im)[:2]), []).append(i)
    return groups


def _normalise(x: torch.Tensor, processor) -> torch.Tensor:
    """float32 ``(x - mean) / std`` per channel, as transformers' ``normalize`` (when the processor asks for it)."""
    if not processor.do_normalize:
        return x
    mean = torch.tensor(np.asarray(processor.image_mean, dtype=np.float32), device=x.device).view(1, -1, 1, 1)
    std = torch.tensor(np.asarray(processor.image_std, dtype=np.float32), device=x.device).view(1, -1, 1, 1)
    return (x - mean) / std


def _rescale(x: torch.Tensor, processor) -> torch.Tensor:
    """transformers' ``rescale``: float64 product, then float32."""
    factor = float(processor.rescale_factor) if processor.do_rescale else 1.0
    return (x.to(torch.float64) * factor).to(torch.float32)


def _size_hw(processor) -> tuple[int, int] | None:
    size = processor.size
    get = size.get if isinstance(size, dict) else (lambda k, d=None: getattr(size, k, d))
    h, w = get("height"), get("width")
    return (int(h), int(w)) if h and w else None


def vit_supported(processor) -> bool:
    """True when ``processor`` is a ViT-style processor that :func:`vit_pixel_values` reproduces exactly."""
    return (_size_hw(processor) is not None and bool(getattr(processor, "do_resize", False))
            and int(getattr(processor, "resample", _PIL_BILINEAR)) == _PIL_BILINEAR
            and not getattr(processor, "do_center_crop", False) and not getattr(processor, "do_pad", False)
            and getattr(processor, "do_convert_rgb", None) in (None, True, False))


def owlv2_supported(processor) -> bool:
    """True when ``processor`` resizes to a fixed size after padding, as :func:`owlv2_pixel_values` reproduces."""
    return _size_hw(processor) is not None and bool(getattr(processor, "do_resize", False))


def vit_pixel_values(images: Sequence[np.ndarray], processor, device: str | torch.device) -> torch.Tensor:
    """``pixel_values`` of a ViT-style processor (resize with PIL's bilinear filter, rescale, normalise) on ``device``.

    Equal to ``processor(images=images, return_tensors="pt")["pixel_values"]`` bit for bit; falls back to the
    processor when its settings are not those (:func:`vit_supported`).
    """
    if not vit_supported(processor):
        return processor(images=list(images), return_tensors="pt")["pixel_values"].to(device)
    size = _size_hw(processor)
    out: list[torch.Tensor | None] = [None] * len(images)
    with torch.autocast(torch.device(device).type, enabled=False):
        for _, idx in by_size(images).items():
            x = pil_bilinear_resize(images_tensor([images[i] for i in idx], device), size)
            x = _normalise(_rescale(x, processor), processor)
            for k, i in enumerate(idx):
                out[i] = x[k]
    return torch.stack(out)


def _mirror(index: np.ndarray, n: int) -> np.ndarray:
    """scipy's ``mirror`` boundary: reflect about the first and last samples (``d c b | a b c d | c b a``)."""
    if n == 1:
        return np.zeros_like(index)
    period = 2 * (n - 1)
    index = np.abs(index) % period
    return np.where(index > n - 1, period - index, index)


def _gaussian_matrix(n: int, sigma: float) -> np.ndarray:
    """``(n, n)`` matrix of scipy's ``gaussian_filter1d`` (truncate 4, mirror boundary)."""
    radius = int(4.0 * sigma + 0.5)
    offsets = np.arange(-radius, radius + 1)
    weights = np.exp(-0.5 / (sigma * sigma) * offsets.astype(np.float64) ** 2)
    weights /= weights.sum()
    out = np.zeros((n, n), dtype=np.float64)
    rows = np.repeat(np.arange(n), len(offsets))
    cols = _mirror((np.arange(n)[:, None] + offsets[None, :]).ravel(), n)
    np.add.at(out, (rows, cols), np.tile(weights, n))
    return out


def _zoom_matrix(n: int, out_size: int) -> np.ndarray:
    """``(out_size, n)`` matrix of scipy's linear ``zoom`` (``grid_mode=True``, mirror boundary)."""
    coord = (np.arange(out_size) + 0.5) * (n / out_size) - 0.5
    if n > 1:
        period = 2.0 * (n - 1)
        coord = np.abs(coord) % period
        coord = np.where(coord > n - 1, period - coord, coord)
    else:
        coord = np.zeros_like(coord)
    left = np.floor(coord).astype(np.int64)
    t = coord - left
    out = np.zeros((out_size, n), dtype=np.float64)
    np.add.at(out, (np.arange(out_size), left), 1 - t)
    np.add.at(out, (np.arange(out_size), _mirror(left + 1, n)), t)
    return out


def owlv2_resize_matrix(n: int, out_size: int) -> np.ndarray:
    """``(out_size, n)``: the OWLv2 processor's resize along one axis, anti-aliasing Gaussian (sigma
    ``(n / out_size - 1) / 2`` when shrinking) then linear zoom."""
    sigma = max(0.0, (n / out_size - 1) / 2)
    zoom = _zoom_matrix(n, out_size)
    return zoom @ _gaussian_matrix(n, sigma) if sigma > 1e-15 else zoom


def owlv2_pixel_values(images: Sequence[np.ndarray], processor, device: str | torch.device) -> torch.Tensor:
    """``pixel_values`` of an OWLv2 processor (rescale, pad to a square at the bottom and right with 0, Gaussian
    anti-aliasing and linear zoom to the model's size, clip to the input's range, normalise) on ``device``.

    Equal to the processor's within float rounding (see the module docstring); falls back to the processor when
    it does not resize to a fixed size.
    """
    if not owlv2_supported(processor):
        return processor(images=list(images), return_tensors="pt")["pixel_values"].to(device)
    out_h, out_w = _size_hw(processor)
    out: list[torch.Tensor | None] = [None] * len(images)
    with torch.autocast(torch.device(device).type, enabled=False):
        for (h, w), idx in by_size(images).items():
            pixels = images_tensor([images[i] for i in idx], device)
            x = _rescale(pixels, processor)
            # the range the output is clipped to, read on the uint8 pixels (rescaling is monotone) and the padding
            lo = _rescale(pixels.amin(dim=(1, 2, 3), keepdim=True), processor)
            hi = _rescale(pixels.amax(dim=(1, 2, 3), keepdim=True), processor)
            if processor.do_pad and h != w:
                side = max(h, w)
                x = torch.nn.functional.pad(x, (0, side - w, 0, side - h), value=0.0)
                lo, hi = lo.clamp(max=0.0), hi.clamp(min=0.0)
            if processor.do_resize:
                x = resample_last(x, out_w, owlv2_resize_matrix)
                x = resample_last(x.transpose(-1, -2), out_h, owlv2_resize_matrix).transpose(-1, -2)
                x = torch.minimum(torch.maximum(x, lo), hi)
            x = _normalise(x.contiguous(), processor)
            for k, i in enumerate(idx):
                out[i] = x[k]
    return torch.stack(out)

