"""Image preprocessing as batched tensor ops on the model's device, equal to the transformers processors'.

The processors of transformers' PIL backend resize each image on the host, one at a time: ``ViTImageProcessor``
(CLIPSeg) and ``GroundingDinoImageProcessor`` through PIL's bilinear filter on ``uint8`` pixels,
``Owlv2ImageProcessor`` through scipy (a Gaussian anti-aliasing filter and a linear zoom, about 0.24 s per image at
960 px on a loaded CPU). Here the same operators run on a ``(B, 3, H, W)`` tensor of same-size images on the
model's device:

- :func:`pil_bilinear_resize` reproduces the fixed-point arithmetic of Pillow's ``Resample.c``: integer filter
  coefficients with 22 fractional bits (:func:`pil_bilinear_taps`), each pass summed in int32 as Pillow sums
  (exact on every device and in every precision mode: no float matrix product, so TF32 cannot reach it), the
  first pass rounded to ``uint8`` before the second, in the installed Pillow's order (:func:`pil_vertical_first`).
  Each pass gathers the ``K`` input rows of every output row (``K = 2 ceil(scale) + 1``), so the work follows the
  output's size, not input x output. It equals ``PIL.Image.resize`` **bit for bit** on random size pairs
  (``tests/models/test_preprocess.py``).
- :func:`vit_pixel_values` (CLIPSeg) and :func:`grounding_dino_pixel_values` (Grounding DINO: the shortest/longest
  edge size of :func:`shortest_edge_size`, padding and ``pixel_mask``) then rescale and normalise through a table
  of the 3 x 256 results of transformers' float operations on each ``uint8`` value: the processor's
  ``pixel_values`` **bit for bit**.
- :func:`owlv2_pixel_values` applies scipy's Gaussian filter (mirror boundary, radius ``int(4 sigma + 0.5)``)
  followed by its linear zoom (``grid_mode=True``, mirror boundary) as one float64 matrix per axis, multiplied in
  float32. scipy accumulates in float64 and stores float32 after each step; the two differ by float rounding only
  (|difference| <= 1e-5 after normalisation, where one ``uint8`` level is 1.5e-2; ``tests/models/test_preprocess.py``).

All run with autocast off (a ``bf16`` job still gets fp32 pixels, as from the processor). A processor whose
settings these functions do not reproduce (another resample filter, a centre crop, a ``max_height`` size) is
called as it is, on the host. On a CPU device the PIL passes run a few image planes at a time (about 4 MB of int32,
so that the working set stays in cache) and cost about what the processor costs (``docs/benchmarks.md``); the
gain is on an accelerator, where the host no longer resizes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import torch

from countboard.models.transfer import to_device

#: Fractional bits of PIL's 8-bit resampling coefficients (``PRECISION_BITS`` of libImaging/Resample.c).
PIL_PRECISION_BITS = 32 - 8 - 2
_PIL_BILINEAR = 2


@functools.lru_cache(maxsize=64)
def pil_bilinear_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """PIL's bilinear resampling along one axis: the first input index of each output ``(out_size,)`` and the
    integer weights of its inputs from there ``(out_size, K)`` (zero past an output's support).

    Follows ``precompute_coeffs`` and ``normalize_coeffs_8bpc`` of Pillow's ``Resample.c``: the triangle filter is
    widened by the downscaling factor (antialiasing), each row is normalised in double precision and rounded to
    ``PIL_PRECISION_BITS`` fractional bits.
    """
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = filterscale  # the bilinear filter's support is 1
    center = (np.arange(out_size) + 0.5) * scale
    first = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)  # C's (int) truncates
    count = np.minimum(np.trunc(center + support + 0.5), in_size).astype(np.int64) - first
    offsets = np.arange(int(count.max()))
    inside = offsets[None, :] < count[:, None]
    # Resample.c multiplies by the reciprocal, and adds the weights in order (a running sum, not numpy's pairwise)
    t = ((first[:, None] + offsets[None, :]) - center[:, None] + 0.5) * (1.0 / filterscale)
    weights = np.where(inside, np.maximum(0.0, 1.0 - np.abs(t)), 0.0)
    total = np.cumsum(weights, axis=1)[:, -1:]
    k = np.where(total != 0.0, weights / np.where(total != 0.0, total, 1.0), weights)
    one = float(1 << PIL_PRECISION_BITS)
    taps = np.where(k < 0, np.trunc(-0.5 + k * one), np.trunc(0.5 + k * one)).astype(np.int64)
    return first, taps


def pil_bilinear_coefficients(in_size: int, out_size: int) -> np.ndarray:
    """``(out_size, in_size)`` integer coefficients of PIL's bilinear resampling along one axis (as float64): the
    dense form of :func:`pil_bilinear_taps`.

    Example:
        >>> (pil_bilinear_coefficients(4, 2) / 2**22).round(3).tolist()
        [[0.429, 0.429, 0.143, 0.0], [0.0, 0.143, 0.429, 0.429]]
    """
    first, taps = pil_bilinear_taps(in_size, out_size)
    out = np.zeros((out_size, in_size), dtype=np.float64)
    for xx in range(out_size):
        n = min(taps.shape[1], in_size - first[xx])
        out[xx, first[xx]:first[xx] + n] = taps[xx, :n]
    return out


@functools.lru_cache(maxsize=128)
def _pil_taps_on(in_size: int, out_size: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pil_bilinear_taps` on ``device``: input indices and int32 weights, ``(K, out_size)`` each."""
    first, taps = pil_bilinear_taps(in_size, out_size)
    index = np.minimum(first[None, :] + np.arange(taps.shape[1])[:, None], in_size - 1)  # weight 0 past the end
    return (torch.from_numpy(index).to(device),
            torch.from_numpy(np.ascontiguousarray(taps.T)).to(device=device, dtype=torch.int32))


def _pil_pass(x: torch.Tensor, out_size: int) -> torch.Tensor:
    """One PIL pass along the rows (dim -2) of int32 ``x`` (whole values 0..255): Pillow's sum of ``pixel * weight``
    over each output's ``K`` inputs in 32-bit integers, rounded, shifted and clipped to 0..255.

    Bilinear weights are not negative and sum to ``2**22`` (up to rounding), so the sums stay below ``2**31``:
    int32 holds them exactly. ``K`` row gathers of the input (``2 ceil(scale) + 1`` for a reduction by ``scale``),
    so the work grows with the output and the filter's width, not with the input's size.
    """
    x = x.contiguous()  # whole rows are gathered: contiguous copies
    index, weights = _pil_taps_on(x.shape[-2], out_size, str(x.device))
    acc = torch.full((*x.shape[:-2], out_size, x.shape[-1]), 1 << (PIL_PRECISION_BITS - 1), dtype=torch.int32,
                     device=x.device)
    for k in range(index.shape[0]):
        acc.addcmul_(x.index_select(-2, index[k]), weights[k].view(-1, 1))
    return acc.bitwise_right_shift_(PIL_PRECISION_BITS).clamp_(0, 255)


@functools.lru_cache(maxsize=1)
def _pillow_version() -> tuple[int, int]:
    import PIL

    major, minor = (int(v) for v in PIL.__version__.split(".")[:2])
    return major, minor


def pil_vertical_first(in_hw: tuple[int, int], out_hw: tuple[int, int]) -> bool:
    """True when the installed Pillow resizes ``in_hw`` to ``out_hw`` with the vertical pass first.

    The passes round to ``uint8`` in between, so the order changes the result by one level at some pixels. Pillow
    before 12.2 always runs the horizontal pass first; 12.2 and 12.3 run the vertical one first for images more
    than 100 times taller than wide whose height shrinks; from 13.0 the vertical pass comes first when the height
    shrinks by more than twice as many pixels as the width (``H - h > 2 (W - w)``; checked against the installed
    wheel on random size pairs in ``tests/models/test_preprocess.py``).

    Example:
        >>> pil_vertical_first((100, 100), (20, 80)), pil_vertical_first((100, 100), (80, 20))  # Pillow >= 13
        (True, False)
    """
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    if out_h >= in_h:
        return False
    version = _pillow_version()
    if version >= (13, 0):
        return in_h - out_h > 2 * (in_w - out_w)
    return version >= (12, 2) and in_h > 100 * in_w


#: Bytes of int32 planes resized together on a CPU (about a core's share of the last-level cache).
_CPU_CHUNK_BYTES = 4 << 20


def _pil_resize_int(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """:func:`pil_bilinear_resize` as int32."""
    h, w = int(size[0]), int(size[1])
    vertical_first = pil_vertical_first(tuple(images.shape[-2:]), (h, w))

    def horizontal(x):
        return _pil_pass(x.transpose(-1, -2), w).transpose(-1, -2) if x.shape[-1] != w else x

    def vertical(x):
        return _pil_pass(x, h) if x.shape[-2] != h else x

    def resize(x):
        x = x.to(torch.int32)
        return horizontal(vertical(x)) if vertical_first else vertical(horizontal(x))

    if images.device.type != "cpu":
        return resize(images)
    # On a CPU a few planes at a time, so that the working set stays in cache (a batch of four 1080p images at
    # once is about 3x slower than plane by plane); small planes together, for fewer operations.
    planes = images.reshape(-1, 1, *images.shape[-2:])
    plane_bytes = 4 * max(planes.shape[-2] * planes.shape[-1], h * w, planes.shape[-2] * w, h * planes.shape[-1])
    chunk = max(1, _CPU_CHUNK_BYTES // plane_bytes)
    return torch.cat([resize(part) for part in planes.split(chunk)]).view(*images.shape[:-2], h, w)


def pil_bilinear_resize(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``(B, C, H, W)`` uint8 images resized to ``size = (h, w)`` as ``PIL.Image.resize(..., BILINEAR)`` does.

    Returns float32 with whole values 0..255 (PIL's ``uint8`` result). Two passes, the first rounded to ``uint8``,
    in the installed Pillow's order (:func:`pil_vertical_first`); an axis whose size does not change is not
    resampled.
    """
    return _pil_resize_int(images, size).to(torch.float32)


def images_tensor(images: Sequence[np.ndarray], device: str | torch.device) -> torch.Tensor:
    """Same-size ``(H, W, 3)`` uint8 arrays as one ``(B, 3, H, W)`` uint8 tensor on ``device``.

    On CUDA the batch is gathered into page-locked memory and copied without waiting (the loader's pinned images
    would otherwise be stacked into pageable memory, whose copy blocks the host)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        stacked = torch.empty((len(images), *np.shape(images[0])), dtype=torch.uint8, pin_memory=True)
        for k, im in enumerate(images):
            stacked[k] = torch.from_numpy(np.asarray(im))
        return stacked.to(dev, non_blocking=True).permute(0, 3, 1, 2)
    stacked = torch.from_numpy(np.ascontiguousarray(np.stack([np.asarray(im) for im in images])))
    return stacked.to(dev).permute(0, 3, 1, 2)


def by_size(images: Sequence[np.ndarray]) -> dict[tuple[int, int], list[int]]:
    """Indices of ``images`` grouped by ``(H, W)``, in order of first appearance."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, im in enumerate(images):
        groups.setdefault(tuple(np.shape(im)[:2]), []).append(i)
    return groups


def _in_image_order(images: Sequence[np.ndarray], make) -> torch.Tensor:
    """``make(hw, idx)`` (a batch of the images at ``idx``, all of size ``hw``) for every size, stacked back in the
    images' order; a single size's batch is returned as it is."""
    groups = by_size(images)
    if len(groups) == 1:
        ((hw, idx),) = groups.items()
        return make(hw, idx)
    out: list[torch.Tensor | None] = [None] * len(images)
    for hw, idx in groups.items():
        for k, x in zip(idx, make(hw, idx), strict=True):
            out[k] = x
    return torch.stack(out)


def _normalise(x: torch.Tensor, processor) -> torch.Tensor:
    """float32 ``(x - mean) / std`` per channel, as transformers' ``normalize`` (when the processor asks for it)."""
    if not processor.do_normalize:
        return x
    mean = to_device(np.asarray(processor.image_mean, dtype=np.float32), x.device).view(1, -1, 1, 1)
    std = to_device(np.asarray(processor.image_std, dtype=np.float32), x.device).view(1, -1, 1, 1)
    return (x - mean) / std


def _rescale_factor(processor) -> float:
    return float(processor.rescale_factor) if processor.do_rescale else 1.0


def _rescale(x: torch.Tensor, processor) -> torch.Tensor:
    """transformers' ``rescale``: float64 product, then float32."""
    return (x.to(torch.float64) * _rescale_factor(processor)).to(torch.float32)


def _uint8_lut(processor, device: str) -> torch.Tensor:
    """``(3 * 256,)`` float32: :func:`_normalise` of :func:`_rescale` of every uint8 value, per channel (made once
    per setting and device)."""
    factor = _rescale_factor(processor)
    if not processor.do_normalize:
        return _lut_on(factor, None, None, device)
    mean, std = (tuple(np.atleast_1d(np.asarray(v, dtype=np.float64)).tolist())
                 for v in (processor.image_mean, processor.image_std))
    return _lut_on(factor, mean, std, device)


@functools.lru_cache(maxsize=16)
def _lut_on(factor: float, mean: tuple | None, std: tuple | None, device: str) -> torch.Tensor:
    settings = SimpleNamespace(do_rescale=True, rescale_factor=factor, do_normalize=mean is not None,
                               image_mean=mean, image_std=std)
    values = torch.arange(256, dtype=torch.float32, device=device).view(1, 1, 1, 256).expand(1, 3, 1, 256)
    return _normalise(_rescale(values, settings), settings).reshape(-1)


def _rescaled_normalised(x: torch.Tensor, processor) -> torch.Tensor:
    """``_normalise(_rescale(x))`` of ``(B, 3, H, W)`` whole values 0..255 (uint8 or int32), read from a table of
    the 3 x 256 possible results (the same float operations on the same values, so the same bits)."""
    lut = _uint8_lut(processor, str(x.device))
    index = x.to(torch.int32) + (torch.arange(3, dtype=torch.int32, device=x.device) * 256).view(1, 3, 1, 1)
    return lut.index_select(0, index.reshape(-1)).view(index.shape)


def _size_value(size, key: str) -> int | None:
    """``size[key]`` of a processor's size (a dict, or transformers' ``SizeDict``); None when absent or 0."""
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return int(value) if value else None


def _size_hw(processor) -> tuple[int, int] | None:
    h, w = _size_value(processor.size, "height"), _size_value(processor.size, "width")
    return (h, w) if h and w else None


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

    def make(_, idx: list[int]) -> torch.Tensor:
        return _rescaled_normalised(_pil_resize_int(images_tensor([images[i] for i in idx], device), size), processor)

    with torch.autocast(torch.device(device).type, enabled=False):
        return _in_image_order(images, make)


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


@functools.lru_cache(maxsize=128)
def _owlv2_axis(n: int, padded: int, out_size: int, factor: float, device: str) -> torch.Tensor:
    """``(out_size, n)`` float32: the OWLv2 resize of a ``padded``-long axis whose samples after the first ``n`` are
    the zero padding (their columns drop out), times the rescale factor (the resize is linear)."""
    m = owlv2_resize_matrix(padded, out_size)[:, :n] * factor
    return torch.from_numpy(np.ascontiguousarray(m)).to(device=device, dtype=torch.float32)


def owlv2_pixel_values(images: Sequence[np.ndarray], processor, device: str | torch.device) -> torch.Tensor:
    """``pixel_values`` of an OWLv2 processor (rescale, pad to a square at the bottom and right with 0, Gaussian
    anti-aliasing and linear zoom to the model's size, clip to the input's range, normalise) on ``device``.

    Rescaling and padding are folded into the two resize matrices (the padding's columns are zero terms, so they are
    left out), applied to the ``uint8`` values as float32: two matrix products per batch of same-size images, then
    the clip and the normalisation in place. Equal to the processor's within float rounding (see the module
    docstring); falls back to the processor when it does not resize to a fixed size.
    """
    if not owlv2_supported(processor):
        return processor(images=list(images), return_tensors="pt")["pixel_values"].to(device)
    out_h, out_w = _size_hw(processor)
    dev = str(torch.device(device))

    def make(hw: tuple[int, int], idx: list[int]) -> torch.Tensor:
        h, w = hw
        pixels = images_tensor([images[i] for i in idx], device)
        # the range the output is clipped to, read on the uint8 arrays before they leave the host (rescaling is
        # monotone; a few microseconds per image there), and the padding
        ranges = to_device([[int(np.min(images[i])), int(np.max(images[i]))] for i in idx], device)
        lo, hi = (_rescale(r, processor).view(-1, 1, 1, 1) for r in ranges.T)
        ph, pw = h, w
        if processor.do_pad and h != w:
            ph = pw = max(h, w)
            lo, hi = lo.clamp(max=0.0), hi.clamp(min=0.0)
        x = pixels.to(torch.float32, memory_format=torch.contiguous_format)
        x = x @ _owlv2_axis(w, pw, out_w, _rescale_factor(processor), dev).T
        x = _owlv2_axis(h, ph, out_h, 1.0, dev) @ x
        return _normalise(x.clamp_(lo, hi), processor)

    with torch.autocast(torch.device(device).type, enabled=False):
        return _in_image_order(images, make)


def shortest_edge_size(hw: tuple[int, int], shortest: int, longest: int | None) -> tuple[int, int]:
    """``(h, w)`` with the shorter side ``shortest`` unless the longer would pass ``longest`` (then the longer side
    is about ``longest``), as transformers' ``get_size_with_aspect_ratio`` computes it (DETR-style resizing).

    Example:
        >>> shortest_edge_size((480, 640), 800, 1333), shortest_edge_size((400, 1600), 800, 1333)
        ((800, 1066), (333, 1333))
    """
    height, width = hw
    size, raw = shortest, None
    if longest is not None:
        short_side, long_side = float(min(height, width)), float(max(height, width))
        if long_side / short_side * size > longest:
            raw = longest * short_side / long_side
            size = int(round(raw))
    if (height <= width and height == size) or (width <= height and width == size):
        return height, width
    scale = raw if raw is not None else size
    if width < height:
        return int(scale * height / width), size
    return size, int(scale * width / height)


def _dino_size(processor, hw: tuple[int, int]) -> tuple[int, int]:
    """The size ``GroundingDinoImageProcessor`` resizes an ``hw`` image to (``hw`` itself without resizing)."""
    if not processor.do_resize:
        return hw
    shortest = _size_value(processor.size, "shortest_edge")
    if shortest:
        return shortest_edge_size(hw, shortest, _size_value(processor.size, "longest_edge"))
    return _size_hw(processor)


def grounding_dino_supported(processor) -> bool:
    """True when ``processor`` resizes as :func:`grounding_dino_pixel_values` reproduces: PIL's bilinear filter to
    a shortest/longest edge or to a fixed height and width (or no resize)."""
    if int(getattr(processor, "resample", _PIL_BILINEAR)) != _PIL_BILINEAR:
        return False
    if not getattr(processor, "do_resize", False):
        return True
    size = processor.size
    return bool(_size_value(size, "shortest_edge") and _size_value(size, "longest_edge")) or (
        _size_hw(processor) is not None and not _size_value(size, "shortest_edge"))


def _rgb8(image) -> bool:
    return isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[-1] == 3


def _dino_padded_size(processor, sizes: set[tuple[int, int]]) -> tuple[int, int] | None:
    """The batch's padded size: ``pad_size``, or the largest resized size; None where the processor would fail
    (unpadded images of different sizes, or a ``pad_size`` smaller than an image)."""
    out_h, out_w = max(h for h, _ in sizes), max(w for _, w in sizes)
    if not processor.do_pad:
        return (out_h, out_w) if len(sizes) == 1 else None
    pad = getattr(processor, "pad_size", None)
    if pad is None:
        return out_h, out_w
    pad_h, pad_w = _size_value(pad, "height"), _size_value(pad, "width")
    return (pad_h, pad_w) if pad_h and pad_w and pad_h >= out_h and pad_w >= out_w else None


def grounding_dino_pixel_values(images: Sequence[np.ndarray], processor,
                                device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``pixel_values`` and ``pixel_mask`` of a Grounding DINO processor on ``device``: each image resized with
    PIL's bilinear filter (shorter side to ``shortest_edge`` unless the longer would pass ``longest_edge``),
    rescaled, normalised, then padded with 0 at the bottom and right to the largest size of the call (or to
    ``pad_size``), the mask 1 on the image and 0 on the padding.

    Same-size images are resized as one batch. Equal to ``processor(images=images, return_tensors="pt")`` bit for
    bit; falls back to the processor for settings it does not reproduce (:func:`grounding_dino_supported`), for
    images that are not ``(H, W, 3)`` uint8 arrays and where the processor would refuse the batch. Without
    ``do_pad`` the mask is all ones (the model's default; the processor returns none).
    """
    groups = by_size(images) if all(_rgb8(im) for im in images) else {}
    out_sizes = {hw: _dino_size(processor, hw) for hw in groups} if grounding_dino_supported(processor) else {}
    padded = _dino_padded_size(processor, set(out_sizes.values())) if out_sizes else None
    if padded is None:
        enc = processor(images=list(images), return_tensors="pt")
        pixels = enc["pixel_values"].to(device)
        mask = enc.get("pixel_mask")
        mask = torch.ones((pixels.shape[0], *pixels.shape[-2:]), dtype=torch.long) if mask is None else mask
        return pixels, mask.to(device)
    pixels = torch.zeros((len(images), 3, *padded), dtype=torch.float32, device=device)
    mask = torch.zeros((len(images), *padded), dtype=torch.long, device=device)
    with torch.autocast(torch.device(device).type, enabled=False):
        for hw, idx in groups.items():
            x = images_tensor([images[i] for i in idx], device)
            (h, w) = out_sizes[hw]
            x = _rescaled_normalised(_pil_resize_int(x, (h, w)) if (h, w) != hw else x, processor)
            if len(idx) == len(images) and (h, w) == padded:  # one size, no padding: the batch as it is
                return x, mask.fill_(1)
            for k, i in enumerate(idx):  # copies on the device (an index tensor would be a host-to-device copy)
                pixels[i, :, :h, :w] = x[k]
                mask[i, :h, :w] = 1
    return pixels, mask
