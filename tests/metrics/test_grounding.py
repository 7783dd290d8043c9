"""Q-GroundCAM metrics: hand-computed maps, degenerate input, and a direct loop implementation on random maps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from countboard.metrics.grounding import (
    METRIC_KEYS,
    clip_box,
    distance_map,
    grounding_metrics,
    grounding_metrics_batch,
    mosaic_grounding,
)


def _loop_metrics(heatmap, box, tau=0.7, delta=50.0, eps=1e-8, tie_tol=0.0):
    """Every metric straight from the paper's formulas, pixel by pixel (independent of the vectorised code)."""
    h, w = len(heatmap), len(heatmap[0])
    lo = min(min(r) for r in heatmap)
    hi = max(max(r) for r in heatmap)
    a = [[(v - lo) / (hi - lo) for v in r] for r in heatmap]
    y0, x0, y1, x1 = box
    inter = union = s_a = s_m = b_inter = b_union = b_a = s_in = pen = b_pen = 0.0
    for i in range(h):
        for j in range(w):
            m = 1.0 if (y0 <= i < y1 and x0 <= j < x1) else 0.0
            v = a[i][j]
            b = 1.0 if v >= 0.5 else 0.0
            inter += v * m
            union += v + m - v * m
            b_inter += b * m
            b_union += b + m - b * m
            s_a += v
            b_a += b
            s_m += m
            s_in += v * m
            d = max(max(y0 - i, i - y1), max(x0 - j, j - x1))
            pen += v * (1 - m) * d
            b_pen += b * (1 - m) * d
    sig = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    s_out = s_a - s_in
    best, top = -1.0, None
    peaks = []
    for i in range(h):
        for j in range(w):
            if a[i][j] > best:
                best, top = a[i][j], (i, j)
            nb = [a[p][q] for p in range(max(i - 1, 0), min(i + 2, h)) for q in range(max(j - 1, 0), min(j + 2, w))]
            if a[i][j] >= max(nb) and a[i][j] > tau:
                peaks.append((a[i][j], i, j))
    peaks.sort(key=lambda t: -t[0])
    kept = []
    for v, i, j in peaks:
        if all((i - p) ** 2 + (j - q) ** 2 > delta**2 for _, p, q in kept):
            kept.append((v, i, j))
    inside = [y0 <= i < y1 and x0 <= j < x1 for v, i, j in kept if v >= kept[0][0] - tie_tol] if kept else []
    return {
        "iou_soft": inter / union,
        "dice_soft": 2 * inter / (s_a + s_m),
        "iou_binary": b_inter / b_union,
        "dice_binary": 2 * b_inter / (b_a + s_m),
        "wdp": sig(math.log(pen / (s_a + eps))) if pen > 0 else 0.0,
        "wdp_binary": sig(math.log(b_pen / (b_a + eps))) if b_pen > 0 else 0.0,
        "io_ratio": sig(math.log(s_in / s_out)) if s_out > 0 else 1.0,
        "pg_hit": int(y0 <= top[0] < y1 and x0 <= top[1] < x1),
        "pg_uncertain": int(any(inside) and not all(inside)),
    }


def test_all_mass_inside():
    a = np.zeros((40, 40))
    a[10:20, 5:25] = np.linspace(0.1, 1.0, 20)[None, :]
    m = grounding_metrics(a, (8, 3, 22, 27))
    assert m["io_ratio"] == 1.0
    assert m["wdp"] == 0.0
    assert m["pg_hit"] == 1 and m["pg_uncertain"] == 0
    assert m["iou_soft"] == pytest.approx(a.sum() / (14 * 24))
    assert m["dice_soft"] == pytest.approx(2 * a.sum() / (a.sum() + 14 * 24))


def test_map_equal_to_box_mask_is_perfect():
    a = np.zeros((12, 12))
    a[3:7, 2:9] = 1.0
    m = grounding_metrics(a, (3, 2, 7, 9))
    assert [m[k] for k in METRIC_KEYS] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1, 0]


@pytest.mark.parametrize("d", [1, 3, 10])
def test_mass_only_outside_at_distance(d):
    a = np.zeros((40, 40))
    a[7, 10 + d] = 1.0  # right of a box whose last column is 9: D = j − x1 = d
    m = grounding_metrics(a, (5, 5, 10, 10))
    assert distance_map((5, 5, 10, 10), (40, 40))[7, 10 + d] == d
    assert m["wdp"] == pytest.approx(1 / (1 + math.exp(-math.log(d / (1 + 1e-8)))))
    assert m["wdp"] == pytest.approx(d / (d + 1))
    assert m["io_ratio"] == 0.0 and m["pg_hit"] == 0
    assert m["iou_soft"] == 0.0 and m["dice_binary"] == 0.0


def test_wdp_mixes_distances_by_mass():
    a = np.zeros((30, 30))
    a[2, 12] = 1.0  # above the box (y0 = 10): D = y0 − i = 8
    a[12, 12] = 1.0  # inside
    m = grounding_metrics(a, (10, 10, 15, 15))
    assert m["wdp"] == pytest.approx(8 / (8 + 2))
    assert m["io_ratio"] == pytest.approx(0.5)


def test_first_row_below_box_has_zero_distance_as_in_the_formula():
    a = np.zeros((20, 20))
    a[10, 7] = 1.0  # row y1 itself: i − y1 = 0
    m = grounding_metrics(a, (5, 5, 10, 10))
    assert m["wdp"] == 0.0 and m["io_ratio"] == 0.0


def test_wdp_binary_counts_thresholded_pixels_by_distance():
    a = np.zeros((30, 30))
    a[12, 12] = 1.0  # inside (10, 10, 15, 15)
    a[2, 12] = 0.6  # above the box: D = 8, kept by A >= 0.5
    a[12, 25] = 0.4  # right of the box: D = 25 - 15 = 10, dropped by the threshold
    m = grounding_metrics(a, (10, 10, 15, 15))
    assert m["wdp_binary"] == pytest.approx(8 / (8 + 2))
    assert m["wdp"] == pytest.approx((0.6 * 8 + 0.4 * 10) / (0.6 * 8 + 0.4 * 10 + 2.0))
    b = grounding_metrics_batch(a[None], np.array([[10, 10, 15, 15]]))
    assert b["wdp_binary"][0] == pytest.approx(0.8, rel=1e-6)


def test_binary_threshold_at_half():
    a = np.zeros((10, 10))
    a[0, 0] = 1.0
    a[2:4, 2:4] = 0.5  # kept by A >= 0.5
    a[5:7, 5:7] = 0.49  # dropped
    m = grounding_metrics(a, (2, 2, 4, 4))
    assert m["iou_binary"] == pytest.approx(4 / 5)
    assert m["dice_binary"] == pytest.approx(8 / 9)


@pytest.mark.parametrize(
    ("second", "uncertain"),
    [((4, 100), 1), ((70, 10), 1), ((4, 40), 0), ((60, 100), 0)],
    ids=["inside+outside", "inside+outside-below", "both-inside", "both-outside"],
)
def test_pointing_game_uncertainty_of_tied_maxima(second, uncertain):
    a = np.zeros((80, 120))
    a[4, 10 if second != (60, 100) else 90] = 1.0
    a[second] = 1.0
    m = grounding_metrics(a, (0, 0, 8, 60))
    assert m["pg_uncertain"] == uncertain
    assert m["pg_hit"] == int(second != (60, 100))


def test_tied_maxima_within_delta_are_suppressed():
    a = np.zeros((80, 120))
    a[4, 50] = 1.0  # inside (0, 0, 8, 60), first in row-major order
    a[4, 70] = 1.0  # outside, 20 px away: suppressed by NMS with delta = 50
    assert grounding_metrics(a, (0, 0, 8, 60))["pg_uncertain"] == 0
    assert grounding_metrics(a, (0, 0, 8, 60), delta=10)["pg_uncertain"] == 1


def test_tie_tolerance_counts_near_equal_maxima_as_tied():
    a = np.zeros((20, 120))
    a[4, 10] = 1.0  # inside (0, 0, 8, 60)
    a[4, 100] = 0.996  # outside, 90 px away
    box = (0, 0, 8, 60)
    assert grounding_metrics(a, box)["pg_uncertain"] == 0  # exact ties only
    assert grounding_metrics(a, box, tie_tol=0.005)["pg_uncertain"] == 1
    assert grounding_metrics(a, box, tie_tol=0.003)["pg_uncertain"] == 0
    b = grounding_metrics_batch(np.stack([a, a]), np.array([box, box]), tie_tol=0.005)
    assert b["pg_uncertain"].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="tie_tol"):
        grounding_metrics_batch(a[None], np.array([box]), tie_tol=-1)


def test_tau_gates_uncertainty_without_normalisation():
    a = np.zeros((20, 120))
    a[4, 10] = a[4, 100] = 0.6
    assert grounding_metrics(a, (0, 0, 8, 60), normalize=False)["pg_uncertain"] == 0
    assert grounding_metrics(a, (0, 0, 8, 60), normalize=False, tau=0.5)["pg_uncertain"] == 1


@pytest.mark.parametrize("value", [0.0, 3.5])
def test_empty_or_constant_map_gives_documented_zeros(value):
    m = grounding_metrics(np.full((16, 16), value), (2, 2, 6, 6))
    assert m["empty_map"] == 1
    assert all(m[k] == 0 for k in METRIC_KEYS)
    b = grounding_metrics_batch(np.full((2, 16, 16), value), np.array([[2, 2, 6, 6]] * 2))
    assert b["empty_map"].tolist() == [1.0, 1.0]
    assert all((b[k] == 0).all() for k in METRIC_KEYS)


def test_nan_activations_raise_or_are_omitted():
    a = np.ones((3, 10, 10))
    a[:, 4, 4] = 2.0
    a[1, 0, 0] = np.nan
    boxes = np.array([[3, 3, 6, 6]] * 3)
    with pytest.raises(ValueError, match="NaN"):
        grounding_metrics(a[1], boxes[1])
    with pytest.raises(ValueError, match=r"indices \[1\]"):
        grounding_metrics_batch(a, boxes)
    out = grounding_metrics_batch(a, boxes, nan_policy="omit")
    assert out["valid"].tolist() == [True, False, True]
    assert np.isnan(out["io_ratio"][1])
    assert out["io_ratio"][[0, 2]].tolist() == [1.0, 1.0]  # normalised: only the 2.0 at (4, 4) keeps mass
    assert out["pg_hit"][[0, 2]].tolist() == [1.0, 1.0]


def test_negative_values_without_normalisation_are_rejected():
    a = np.zeros((2, 8, 8))
    a[0, 2, 2] = 1.0
    a[1, 2, 2] = -1.0
    with pytest.raises(ValueError, match="non-negative"):
        grounding_metrics(a[1], (0, 0, 4, 4), normalize=False)
    out = grounding_metrics_batch(a, np.array([[0, 0, 4, 4]] * 2), normalize=False, nan_policy="omit")
    assert out["valid"].tolist() == [True, False] and out["io_ratio"][0] == 1.0


def test_box_rounds_to_nearest_pixel_edge():
    assert clip_box((1.5, 2.49, 4.5, 6.51), (10, 10)) == (2, 2, 5, 7)


def test_box_outside_image_raises_and_partial_box_is_clipped():
    a = np.random.default_rng(0).random((20, 30))
    with pytest.raises(ValueError, match="outside the 20x30 image"):
        grounding_metrics(a, (25, 0, 30, 10))
    with pytest.raises(ValueError, match="no area"):
        grounding_metrics(a, (5, 5, 5, 10))
    with pytest.raises(ValueError, match=r"box 1: .*outside"):
        grounding_metrics_batch(np.stack([a, a]), np.array([[0, 0, 5, 5], [-9, -9, -1, -1]]))
    assert clip_box((-4, 25, 8, 44), (20, 30)) == (0, 25, 8, 30)
    assert grounding_metrics(a, (-4, 25, 8, 44)) == grounding_metrics(a, (0, 25, 8, 30))


def _random_maps(rng, n, h, w):
    maps = rng.random((n, h, w))
    maps[::3] = np.round(maps[::3] * 4) / 4  # plateaus: many tied maxima
    maps[1::3] **= 4
    boxes = []
    for _ in range(n):
        y0, x0 = rng.integers(0, h - 2), rng.integers(0, w - 2)
        boxes.append((y0, x0, rng.integers(y0 + 1, h + 1), rng.integers(x0 + 1, w + 1)))
    return maps, np.array(boxes)


def test_random_maps_match_direct_loop_implementation():
    rng = np.random.default_rng(42)
    maps, boxes = _random_maps(rng, 30, 14, 19)
    batch = grounding_metrics_batch(maps, boxes, delta=4.0)
    n_uncertain = 0
    for k in range(len(maps)):
        ref = _loop_metrics(maps[k].tolist(), tuple(int(v) for v in boxes[k]), delta=4.0)
        got = grounding_metrics(maps[k], boxes[k], delta=4.0)
        n_uncertain += ref["pg_uncertain"]
        for key in METRIC_KEYS:
            assert got[key] == pytest.approx(ref[key], rel=1e-9, abs=1e-12), (k, key)
            assert batch[key][k] == pytest.approx(ref[key], rel=1e-5, abs=1e-6), (k, key)
    assert 0 < n_uncertain < len(maps)  # the seeded set exercises both outcomes


@pytest.mark.parametrize("tie_tol", [0.02, 0.1])
def test_tie_tolerance_matches_direct_loop_implementation(tie_tol):
    rng = np.random.default_rng(3)
    maps, boxes = _random_maps(rng, 30, 14, 19)
    batch = grounding_metrics_batch(maps, boxes, delta=4.0, tie_tol=tie_tol)
    refs = [_loop_metrics(maps[k].tolist(), tuple(int(v) for v in boxes[k]), delta=4.0, tie_tol=tie_tol)
            for k in range(len(maps))]
    single = [grounding_metrics(maps[k], boxes[k], delta=4.0, tie_tol=tie_tol)["pg_uncertain"]
              for k in range(len(maps))]
    expected = [r["pg_uncertain"] for r in refs]
    assert single == expected and batch["pg_uncertain"].tolist() == expected
    exact = grounding_metrics_batch(maps, boxes, delta=4.0)["pg_uncertain"]
    assert sum(expected) > exact.sum()  # the tolerance adds near-ties on this seeded set


def test_batch_matches_single_on_larger_smooth_maps():
    rng = np.random.default_rng(7)
    maps, boxes = _random_maps(rng, 9, 64, 48)
    maps = np.cumsum(np.cumsum(maps, axis=1), axis=2)  # smooth, offset far from zero
    batch = grounding_metrics_batch(maps, boxes, chunk_size=4)
    serial = grounding_metrics_batch(maps, boxes, chunk_size=2, workers=1)
    assert all(np.array_equal(batch[k], serial[k]) for k in METRIC_KEYS)
    for k in range(len(maps)):
        single = grounding_metrics(maps[k], boxes[k])
        for key in METRIC_KEYS:
            assert batch[key][k] == pytest.approx(single[key], rel=1e-4, abs=1e-5), (k, key)


def test_mosaic_grounding_uses_positive_half_as_box():
    d = np.zeros((4, 8))
    d[1, 1] = 3.0
    d[2, 6] = 1.0  # column 6, positive half ends at column 3: D = j − x1 = 6 − 4 = 2
    m = mosaic_grounding(d, 4, "horizontal")
    assert m["mosaic_io_ratio"] == pytest.approx(0.75)
    assert m["mosaic_wdp"] == pytest.approx(2 / (2 + 4))
    right = mosaic_grounding(d, 4, "horizontal", positive_first=False)
    assert right["mosaic_io_ratio"] == pytest.approx(0.25)
    assert mosaic_grounding(d.T, 4, "vertical")["mosaic_io_ratio"] == pytest.approx(0.75)
    assert mosaic_grounding(np.zeros((4, 8)), 4, "horizontal") == {"mosaic_io_ratio": 0.0, "mosaic_wdp": 0.0}
    with pytest.raises(ValueError, match="seam 8"):
        mosaic_grounding(d, 8, "horizontal")
    with pytest.raises(ValueError, match="orientation"):
        mosaic_grounding(d, 4, "diagonal")


def test_docstring_examples():
    import doctest

    from countboard.metrics import grounding, pointing_game

    for module in (grounding, pointing_game):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.attempted >= 3 and result.failed == 0
