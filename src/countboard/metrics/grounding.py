"""Q-GroundCAM grounding metrics: how well an activation map agrees with a ground-truth box.

Rajabi & Košecká, "Q-GroundCAM: Quantifying Grounding in Vision Language Models via GradCAM". For one activation
map ``A`` (``H×W``, min-max normalised to ``[0, 1]``) and one box ``(y0, x0, y1, x1)`` whose mask ``M`` covers rows
``y0..y1-1`` and columns ``x0..x1-1``:

- ``iou_soft = Σ(A·M) / Σ(A + M − A·M)``, ``dice_soft = 2Σ(A·M) / (ΣA + ΣM)``;
- ``iou_binary``, ``dice_binary``: the same with ``A`` thresholded at 0.5 (``A >= 0.5``);
- ``wdp = Sigmoid(log(ΣP / (ΣA + ε)))``, ``P = A·(1 − M)·D``,
  ``D_ij = max(max(y0 − i, i − y1), max(x0 − j, j − x1))`` (lower is better); ``wdp_binary``: the same with ``A``
  thresholded at 0.5 (the paper's Table 1 "WDP Binary", §4's "more practical metric");
- ``io_ratio = Sigmoid(log(S_in / S_out))``: ``S_in`` the mass inside the box, ``S_out`` the rest;
- ``pg_hit``: 1 when the (first, row-major) maximum of ``A`` lies in the box;
- ``pg_uncertain``: 1 when the tied top local maxima above ``tau`` that survive non-maximum suppression (radius
  ``delta``) are not all inside or all outside the box (``countboard.metrics.pointing_game``; ``tie_tol`` sets
  what counts as tied).

``Sigmoid(log(r)) = r / (1 + r)``, so ``io_ratio = S_in / ΣA`` and ``wdp = ΣP / (ΣP + ΣA + ε)``; the code uses these
exact closed forms, which also settle the limits without warnings: all mass inside gives ``io_ratio = 1`` (``S_out =
0``) and no mass outside gives ``wdp = 0`` (``ΣP = 0``).

Documented values for degenerate input:

- An empty (all-zero) or constant map has no localisation; min-max normalisation maps it to zeros (the convention of
  common GradCAM code, ``(A − min) / (max − min + ε)``) and every metric is 0, ``empty_map`` is 1.
- Boxes are clipped to the image; a box that does not overlap the image, or has no area, raises ``ValueError``.
- NaN or infinite activations raise ``ValueError`` (``grounding_metrics_batch(..., nan_policy="omit")`` instead
  marks the map invalid and gives NaN metrics for it, so a sweep can record the unit as failed and go on).
- Ties between maxima are exact equality of activation values by default (as produced by plateaus, nearest
  upsampling, and bicubic upsampling clipped to ``[0, 1]``); ``tie_tol > 0`` widens them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from countboard.metrics.pointing_game import pg_uncertain, pointing_game

EPS = 1e-8
BINARY_THRESHOLD = 0.5
METRIC_KEYS = ("iou_soft", "dice_soft", "iou_binary", "dice_binary", "wdp", "wdp_binary", "io_ratio", "pg_hit",
               "pg_uncertain")


def clip_box(box: Sequence[float], shape: tuple[int, int]) -> tuple[int, int, int, int]:
    """The box ``(y0, x0, y1, x1)`` rounded to the nearest pixel edges (halves up) and clipped to an ``(H, W)`` image.

    Raises:
        ValueError: when the box has no area or lies entirely outside the image.

    Example:
        >>> clip_box((-5, 2, 4, 40), (10, 10))
        (0, 2, 4, 10)
    """
    if len(box) != 4:
        raise ValueError(f"box {box!r} must have 4 numbers (y0, x0, y1, x1)")
    h, w = shape
    y0, x0, y1, x1 = (int(np.floor(float(v) + 0.5)) for v in box)  # nearest pixel edge, halves up
    if y1 <= y0 or x1 <= x0:
        raise ValueError(f"box {tuple(box)} has no area: need y1 > y0 and x1 > x0 in (y0, x0, y1, x1) order")
    cy0, cx0, cy1, cx1 = max(y0, 0), max(x0, 0), min(y1, h), min(x1, w)
    if cy1 <= cy0 or cx1 <= cx0:
        raise ValueError(f"box {tuple(box)} lies outside the {h}x{w} image; boxes are (y0, x0, y1, x1) in pixels")
    return cy0, cx0, cy1, cx1


def normalize_map(heatmap: np.ndarray) -> np.ndarray:
    """Min-max normalise to ``[0, 1]`` (float64); constant maps become zeros.

    Raises:
        ValueError: for a map that is not 2-D or has NaN/infinite values.

    Example:
        >>> normalize_map(np.array([[2.0, 4.0], [3.0, 2.0]])).tolist()
        [[0.0, 1.0], [0.5, 0.0]]
    """
    a = np.asarray(heatmap, dtype=np.float64)
    if a.ndim != 2 or a.size == 0:
        raise ValueError(f"activation map must be a non-empty 2-D (H, W) array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"activation map has {int((~np.isfinite(a)).sum())} NaN/infinite values; "
                         "check the model output (GradCAM of a non-finite score?)")
    lo, hi = a.min(), a.max()
    if hi <= lo:
        return np.zeros_like(a)
    return (a - lo) / (hi - lo)


def distance_map(box: tuple[int, int, int, int], shape: tuple[int, int]) -> np.ndarray:
    """``D_ij = max(max(y0 − i, i − y1), max(x0 − j, j − x1))`` of the WDP penalty (negative or 0 inside).

    Example:
        >>> distance_map((1, 1, 2, 2), (3, 3)).tolist()
        [[1, 1, 1], [1, 0, 0], [1, 0, 0]]
    """
    y0, x0, y1, x1 = box
    i = np.arange(shape[0])[:, None]
    j = np.arange(shape[1])[None, :]
    return np.maximum(np.maximum(y0 - i, i - y1), np.maximum(x0 - j, j - x1))


def grounding_metrics(heatmap: np.ndarray, box: Sequence[float], *, tau: float = 0.7, delta: float = 50,
                      normalize: bool = True, tie_tol: float = 0.0) -> dict[str, float]:
    """All Q-GroundCAM metrics of one activation map and one box.

    Args:
        heatmap: ``(H, W)`` activations; min-max normalised here unless ``normalize=False`` (then it must already be
            non-negative; used for density maps, whose scale carries no meaning for these ratios).
        box: ``(y0, x0, y1, x1)`` in pixels of the map; the mask covers rows ``y0..y1-1``, columns ``x0..x1-1``.
        tau: Activation threshold of the local maxima considered by the pointing-game uncertainty.
        delta: NMS radius (pixels) of the pointing-game uncertainty.
        normalize: Min-max normalise first (the paper's setting).
        tie_tol: Local maxima within ``tie_tol`` of the top value count as tied in ``pg_uncertain`` (0: exact).

    Returns:
        ``iou_soft``, ``dice_soft``, ``iou_binary``, ``dice_binary``, ``wdp``, ``wdp_binary``, ``io_ratio``,
        ``pg_hit``,
        ``pg_uncertain`` and ``empty_map`` (1 for an all-zero or constant map, whose metrics are all 0).

    Example:
        >>> a = np.zeros((10, 10)); a[2:5, 2:5] = 1.0
        >>> m = grounding_metrics(a, (2, 2, 5, 5))
        >>> m["iou_soft"], m["io_ratio"], m["wdp"], m["pg_hit"]
        (1.0, 1.0, 0.0, 1)
    """
    if normalize:
        a = normalize_map(heatmap)
    else:
        a = np.asarray(heatmap, dtype=np.float64)
        if a.ndim != 2 or a.size == 0 or not np.isfinite(a).all() or a.min() < 0:
            raise ValueError(f"activation map (shape {a.shape}) must be 2-D, finite and non-negative "
                             "when normalize=False")
    b = clip_box(box, a.shape)
    if a.max() <= 0:
        return {**dict.fromkeys(METRIC_KEYS, 0.0), "pg_hit": 0, "pg_uncertain": 0, "empty_map": 1}
    y0, x0, y1, x1 = b
    total = float(a.sum())
    s_in = float(a[y0:y1, x0:x1].sum())
    area = float((y1 - y0) * (x1 - x0))
    binary = a >= BINARY_THRESHOLD
    b_total = float(binary.sum())
    b_in = float(binary[y0:y1, x0:x1].sum())
    dist = np.maximum(distance_map(b, a.shape), 0)
    penalty = float((a * dist).sum())
    b_penalty = float((binary * dist).sum())
    hit, uncertain = pointing_game(a, b, tau=tau, delta=delta, tie_tol=tie_tol)
    return {**_mass_ratios(s_in, total, area, b_in, b_total, penalty, b_penalty),
            "pg_hit": hit, "pg_uncertain": uncertain, "empty_map": 0}


def _mass_ratios(s_in, total, area, b_in, b_total, penalty, b_penalty) -> dict:
    """The overlap and distance-penalty metrics from a map's mass sums (floats, or arrays of one per map).

    ``s_in``/``total``: map mass inside the box / overall; ``b_*``: the same for the binarised map; ``area``: box
    pixels; ``penalty``/``b_penalty``: mass weighted by the distance to the box.
    """
    return {
        "iou_soft": s_in / (total + area - s_in),
        "dice_soft": 2 * s_in / (total + area),
        "iou_binary": b_in / (b_total + area - b_in),
        "dice_binary": 2 * b_in / (b_total + area),
        "wdp": penalty / (penalty + total + EPS),
        "wdp_binary": b_penalty / (b_penalty + b_total + EPS),
        "io_ratio": s_in / total,
    }


def _clip_boxes(boxes: np.ndarray, n: int, shape: tuple[int, int]) -> np.ndarray:
    boxes = np.asarray(boxes, dtype=np.float64)
    if boxes.shape != (n, 4):
        raise ValueError(f"boxes must have shape ({n}, 4) for {n} maps, got {boxes.shape}")
    out = np.empty((n, 4), dtype=np.int64)
    for k in range(n):
        try:
            out[k] = clip_box(boxes[k], shape)
        except ValueError as err:
            raise ValueError(f"box {k}: {err}") from None
    return out


class _Buffers:
    """Work arrays reused across chunks (fresh multi-megabyte arrays per chunk cost page faults).

    ``ab[:, 0]`` holds the normalised maps and ``ab[:, 1]`` their ``>= 0.5`` masks, side by side per map, so one
    matrix product serves the soft and the binary sums.
    """

    def __init__(self, n: int, h: int, w: int):
        self.ab = np.empty((n, 2, h, w), dtype=np.float32)
        self.d = np.empty((n, h, w), dtype=np.float32)


def _mass_sums(ab: np.ndarray, boxes: np.ndarray, buf: _Buffers) -> tuple[np.ndarray, ...]:
    """Per map: mass inside the box, total mass, the same for ``a >= 0.5``, and ``Σ A·max(D, 0)`` for both.

    ``ab`` is ``(n, 2, H, W)`` with the normalised maps in ``ab[:, 0]``; ``ab[:, 1]`` is filled here with their
    binary masks. The box mask is separable (rows × columns), so box sums are one batched matrix product with the
    column mask (and a column of ones for the totals) followed by a dot product with the row mask.
    """
    n, _, h, w = ab.shape
    rows, cols = np.arange(h), np.arange(w)
    y0, x0, y1, x1 = (boxes[:, k, None] for k in range(4))
    row_in = ((rows >= y0) & (rows < y1)).astype(np.float64)
    probe = np.stack([((cols >= x0) & (cols < x1)).astype(np.float32), np.ones((n, w), np.float32)], axis=2)
    np.greater_equal(ab[:, 0], BINARY_THRESHOLD, out=ab[:, 1], casting="unsafe")
    sums = (ab.reshape(n, 2 * h, w) @ probe).astype(np.float64).reshape(n, 2, h, 2)
    dy = np.maximum(np.maximum(y0 - rows, rows - y1), 0).astype(np.float32)
    dx = np.maximum(np.maximum(x0 - cols, cols - x1), 0).astype(np.float32)
    dist = np.maximum(dy[:, :, None], dx[:, None, :], out=buf.d[:n]).reshape(n, h * w, 1)
    penalty = (ab.reshape(n, 2, h * w) @ dist)[:, :, 0].astype(np.float64)
    return (np.einsum("nh,nh->n", row_in, sums[:, 0, :, 0]), sums[:, 0, :, 1].sum(axis=1),
            np.einsum("nh,nh->n", row_in, sums[:, 1, :, 0]), sums[:, 1, :, 1].sum(axis=1),
            penalty[:, 0], penalty[:, 1])


def _chunk_metrics(x: np.ndarray, boxes: np.ndarray, tau: float, delta: float, normalize: bool, tie_tol: float,
                   buf: _Buffers) -> dict:
    n, h, w = x.shape
    flat = x.reshape(n, h * w)
    first = flat.argmax(axis=1)
    last = h * w - 1 - flat[:, ::-1].argmax(axis=1)
    xmax = flat[np.arange(n), first].astype(np.float64)
    xmin = flat.min(axis=1).astype(np.float64)
    valid = np.isfinite(xmax) & np.isfinite(xmin) & (normalize | (xmin >= 0))
    if not valid.all():
        x = np.where(valid[:, None, None], x, 0)
    lo = np.where(valid & normalize, xmin, 0)
    span = np.where(valid, xmax, 0) - lo
    empty = span <= 0
    scale = np.where(empty, 0, 1 / np.where(empty, 1, span)) if normalize else np.where(valid, 1.0, 0.0)
    a = np.subtract(x, lo[:, None, None].astype(np.float32), out=buf.ab[:n, 0])
    a *= scale[:, None, None].astype(np.float32)
    s_in, total, b_in, b_total, penalty, b_penalty = _mass_sums(buf.ab[:n], boxes, buf)
    y0, x0, y1, x1 = (boxes[:, k] for k in range(4))
    area = ((y1 - y0) * (x1 - x0)).astype(np.float64)
    fy, fx = first // w, first % w
    hit = (fy >= y0) & (fy < y1) & (fx >= x0) & (fx < x1) & ~empty
    uncertain = np.zeros(n)
    top = np.where(normalize, 1.0, xmax)
    # Only maps with a second pixel (nearly) tied with the maximum can be uncertain; the margin keeps every such
    # map for the exact float64 check, which decides.
    margin = (tie_tol * (1 + 1e-3) + 1e-6) * np.where(normalize, span, 1.0)
    if tie_tol > 0:
        several = (flat >= (xmax - margin)[:, None].astype(np.float32)).sum(axis=1) > 1
    else:
        several = first != last
    for k in np.flatnonzero(valid & ~empty & (top > tau) & several):
        if tie_tol == 0:
            # exact ties, local maxima and their order do not change under the (increasing) normalisation, and the
            # tied maxima equal the top value, already known to exceed tau: the raw map decides as well
            uncertain[k] = pg_uncertain(x[k], tuple(boxes[k]), tau=-np.inf, delta=delta)
            continue
        xk = x[k].astype(np.float64)
        ak = (xk - lo[k]) / span[k] if normalize else xk
        uncertain[k] = pg_uncertain(ak, tuple(boxes[k]), tau=tau, delta=delta, tie_tol=tie_tol)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {**_mass_ratios(s_in, total, area, b_in, b_total, penalty, b_penalty),
               "pg_hit": hit.astype(np.float64), "pg_uncertain": uncertain}
    for key in METRIC_KEYS:
        out[key] = np.where(valid, np.where(empty, 0.0, out[key]), np.nan)
    out["empty_map"] = (empty & valid).astype(np.float64)
    out["valid"] = valid
    return out


def grounding_metrics_batch(heatmaps: np.ndarray, boxes: np.ndarray, *, tau: float = 0.7, delta: float = 50,
                            normalize: bool = True, tie_tol: float = 0.0, nan_policy: str = "raise",
                            chunk_size: int = 4, workers: int = 2) -> dict[str, np.ndarray]:
    """Vectorised ``grounding_metrics`` over ``N`` maps of one size (same values, same documented limits).

    Box sums are batched matrix products with the separable box mask; the pointing-game uncertainty only needs the
    pixels tied with each map's maximum (every sorted list of maxima starts with them), so NMS runs only for the rare
    maps with several tied maxima on both sides of the box edge. Maps are processed ``chunk_size`` at a time in
    float32 to stay in cache.

    Args:
        heatmaps: ``(N, H, W)`` activations.
        boxes: ``(N, 4)`` boxes ``(y0, x0, y1, x1)``.
        tau, delta, normalize, tie_tol: As in ``grounding_metrics``.
        nan_policy: ``"raise"`` (ValueError naming the maps with NaN/infinite values) or ``"omit"`` (their metrics
            are NaN and ``valid`` is False).
        chunk_size: Maps per vectorised step.
        workers: Threads working on separate chunks (1 = no threads).

    Returns:
        One ``(N,)`` float array per key of ``grounding_metrics`` plus the boolean ``valid``.

    Example:
        >>> maps = np.zeros((2, 10, 10)); maps[0, 2:5, 2:5] = 1.0; maps[1, 8, 8] = 1.0
        >>> grounding_metrics_batch(maps, np.array([[2, 2, 5, 5]] * 2))["io_ratio"].tolist()
        [1.0, 0.0]
    """
    if nan_policy not in ("raise", "omit"):
        raise ValueError(f"nan_policy must be 'raise' or 'omit', got {nan_policy!r}")
    if tie_tol < 0:
        raise ValueError(f"tie_tol must be >= 0, got {tie_tol}")
    heatmaps = np.asarray(heatmaps)
    if heatmaps.ndim != 3 or heatmaps.shape[1] == 0 or heatmaps.shape[2] == 0:
        raise ValueError(f"heatmaps must be a (N, H, W) array, got shape {heatmaps.shape}")
    n = heatmaps.shape[0]
    clipped = _clip_boxes(boxes, n, heatmaps.shape[1:])
    starts = list(range(0, n, chunk_size))
    workers = max(1, min(int(workers), len(starts)))

    def run(share: list[int]) -> list[dict]:
        buf = _Buffers(min(chunk_size, n), *heatmaps.shape[1:])
        return [_chunk_metrics(np.asarray(heatmaps[s:s + chunk_size], dtype=np.float32),
                               clipped[s:s + chunk_size], tau, delta, normalize, tie_tol,
                               buf) for s in share]

    shares = [starts[k * len(starts) // workers:(k + 1) * len(starts) // workers] for k in range(workers)]
    if workers == 1:
        parts = run(starts)
    else:  # numpy releases the GIL in the array kernels, so threads use several cores
        with ThreadPoolExecutor(workers) as pool:
            parts = [p for share_parts in pool.map(run, shares) for p in share_parts]
    keys = (*METRIC_KEYS, "empty_map", "valid")
    out = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in keys}
    bad = np.flatnonzero(~out["valid"])
    if nan_policy == "raise" and len(bad):
        what = "NaN/infinite" + ("" if normalize else " or negative")
        raise ValueError(f"{len(bad)} activation maps have {what} values (indices {bad[:10].tolist()}); "
                         "check the model output or pass nan_policy='omit'")
    return out


def mosaic_grounding(density_map: np.ndarray, seam: int, orientation: str, *,
                     positive_first: bool = True) -> dict[str, float]:
    """``io_ratio`` and ``wdp`` of a counter's density map on a two-image mosaic, the positive half as the box.

    Negative density values are clipped to 0 and the map is not min-max normalised (both ratios are scale-free, and
    subtracting the minimum would change a count). An all-zero density gives 0 for both, as for empty maps above.

    Args:
        density_map: ``(H, W)`` density of the mosaic prompted with the positive class.
        seam: Index of the first row (``"vertical"``: halves stacked) or column (``"horizontal"``: side by side) of
            the second half.
        orientation: ``"horizontal"`` or ``"vertical"``.
        positive_first: True when the positive image is the left/top half.

    Returns:
        ``{"mosaic_io_ratio": ..., "mosaic_wdp": ...}``.

    Example:
        >>> d = np.zeros((4, 8)); d[1, 1] = 3.0; d[2, 6] = 1.0
        >>> mosaic_grounding(d, 4, "horizontal")["mosaic_io_ratio"]
        0.75
    """
    d = np.asarray(density_map, dtype=np.float64)
    if d.ndim != 2:
        raise ValueError(f"density map must be 2-D (H, W), got shape {d.shape}")
    h, w = d.shape
    if orientation not in ("horizontal", "vertical"):
        raise ValueError(f"orientation must be 'horizontal' (side by side) or 'vertical' (stacked), got {orientation!r}")
    extent = w if orientation == "horizontal" else h
    if not 0 < seam < extent:
        raise ValueError(f"seam {seam} must lie strictly inside the map ({orientation} extent {extent})")
    lo, hi = (0, seam) if positive_first else (seam, extent)
    box = (0, lo, h, hi) if orientation == "horizontal" else (lo, 0, hi, w)
    m = grounding_metrics(np.clip(d, 0, None), box, normalize=False)
    return {"mosaic_io_ratio": float(m["io_ratio"]), "mosaic_wdp": float(m["wdp"])}
