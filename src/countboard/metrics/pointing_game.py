"""Pointing game and its uncertainty (Q-GroundCAM, Scenario 1) on one normalised activation map.

The hit is the (first, row-major) global maximum falling in the box. The uncertainty follows the paper's
procedure: local maxima above ``tau`` (pixels not smaller than any of their 8 neighbours), sorted by value (ties in
row-major order), greedy NMS that drops a maximum within Euclidean distance ``delta`` of one already kept; the map is
uncertain when the kept maxima *tied with the top value* are not all inside or all outside the box.

What counts as tied is a choice the paper leaves to its code. ``tie_tol = 0`` (the default, and the leaderboard's
setting) takes exact equality: the "identical activations … each with a value of 1.0" of the paper's Figure 1, which
arise where an upsampled map is clipped to ``[0, 1]`` (see ``countboard.grounding.models.gradcam.upsample_map``, method
``bicubic_clip``). ``tie_tol > 0`` counts maxima whose value is within ``tie_tol`` of the top one as tied (on the
normalised ``[0, 1]`` scale), for maps whose near-equal peaks are equally undecidable.
"""

from __future__ import annotations

import numpy as np


def in_box(ij: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """Which ``(K, 2)`` pixel coordinates ``(i, j)`` lie in the clipped box ``(y0, x0, y1, x1)``.

    Example:
        >>> in_box(np.array([[0, 0], [2, 5]]), (0, 0, 3, 5)).tolist()
        [True, False]
    """
    y0, x0, y1, x1 = box
    return (ij[:, 0] >= y0) & (ij[:, 0] < y1) & (ij[:, 1] >= x0) & (ij[:, 1] < x1)


def nms_mixed(points: np.ndarray, inside: np.ndarray, delta: float) -> bool:
    """Greedy NMS over ``points`` (already in processing order); True when the survivors are both in and out."""
    alive = np.ones(len(points), dtype=bool)
    kept_in = kept_out = False
    for k in range(len(points)):
        if not alive[k]:
            continue
        kept_in |= bool(inside[k])
        kept_out |= not bool(inside[k])
        if kept_in and kept_out:
            return True
        d2 = ((points[k + 1:] - points[k]) ** 2).sum(axis=1)
        alive[k + 1:] &= d2 > delta * delta
    return False


def pg_uncertain(a: np.ndarray, box: tuple[int, int, int, int], *, tau: float = 0.7, delta: float = 50,
                 tie_tol: float = 0.0) -> int:
    """1 when the tied top local maxima of ``a`` that survive NMS fall both inside and outside ``box``.

    Args:
        a: ``(H, W)`` map (normalised to ``[0, 1]`` in the paper's setting).
        box: Clipped ``(y0, x0, y1, x1)``.
        tau: Local maxima must exceed it.
        delta: NMS radius in pixels.
        tie_tol: Maxima within ``tie_tol`` of the top value count as tied (0: exact equality).

    Example:
        >>> a = np.zeros((8, 120)); a[4, 10] = 1.0; a[4, 100] = 0.999
        >>> pg_uncertain(a, (0, 0, 8, 60)), pg_uncertain(a, (0, 0, 8, 60), tie_tol=0.001)
        (0, 1)
    """
    if tie_tol < 0:
        raise ValueError(f"tie_tol must be >= 0, got {tie_tol}")
    top = a.max()
    # Every local maximum tied with the top value is among the pixels within tie_tol of the global maximum, so only
    # those are examined (the global maximum itself is always a local maximum).
    ij = np.argwhere(a >= top - tie_tol)
    if len(ij) < 2 or top <= tau:
        return 0
    values = a[ij[:, 0], ij[:, 1]]
    peak = (values > tau) & (values >= _neighbourhood_max(a, ij))
    ij, values = ij[peak], values[peak]
    # sorted by value, ties in row-major order; the tied maxima lead the sorted list of all maxima, so NMS among
    # them alone keeps exactly what NMS over all maxima would keep of them
    ij = ij[np.argsort(-values, kind="stable")]
    inside = in_box(ij, box)
    if inside.all() or not inside.any():
        return 0
    return int(nms_mixed(ij.astype(np.float64), inside, delta))


def _neighbourhood_max(a: np.ndarray, ij: np.ndarray) -> np.ndarray:
    """Largest value among the 8 neighbours and the pixel itself for each ``(i, j)`` (edges repeated)."""
    h, w = a.shape
    best = np.full(len(ij), -np.inf)
    for di in (-1, 0, 1):
        rows = np.clip(ij[:, 0] + di, 0, h - 1)
        for dj in (-1, 0, 1):
            best = np.maximum(best, a[rows, np.clip(ij[:, 1] + dj, 0, w - 1)])
    return best


def pointing_game(a: np.ndarray, box: tuple[int, int, int, int], *, tau: float = 0.7, delta: float = 50,
                  tie_tol: float = 0.0) -> tuple[int, int]:
    """Pointing-game hit and uncertainty of a normalised map ``a`` and a clipped box.

    Example:
        >>> a = np.zeros((8, 120)); a[4, 10] = a[4, 100] = 1.0
        >>> pointing_game(a, (0, 0, 8, 60))
        (1, 1)
    """
    if a.max() <= 0:
        return 0, 0
    top = np.unravel_index(int(np.argmax(a)), a.shape)
    hit = int(in_box(np.array([top]), box)[0])
    return hit, pg_uncertain(a, box, tau=tau, delta=delta, tie_tol=tie_tol)
