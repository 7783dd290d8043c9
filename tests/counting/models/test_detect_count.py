import numpy as np
import pytest

from countboard.counting.models.detect_count import cxcywh_to_yxyx, detections_to_density, nms, pairwise_iou


def _iou_loop(a, b):
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ih * iw
    return ih * iw / union if union > 0 else 0.0


def _nms_loop(boxes, scores, thr):
    kept = []
    for i in sorted(range(len(boxes)), key=lambda k: (-scores[k], k)):
        if all(_iou_loop(boxes[i], boxes[j]) <= thr for j in kept):
            kept.append(i)
    return kept


def _random_boxes(rng, n):
    y0, x0 = rng.uniform(0, 50, n), rng.uniform(0, 50, n)
    return np.stack([y0, x0, y0 + rng.uniform(1, 20, n), x0 + rng.uniform(1, 20, n)], axis=1)


def test_cxcywh_to_yxyx_hand_case():
    out = cxcywh_to_yxyx(np.array([[0.25, 0.5, 0.5, 0.2]]), (100, 40))
    np.testing.assert_allclose(out, [[40, 0, 60, 20]])


def test_pairwise_iou_hand_case_and_loop():
    np.testing.assert_allclose(pairwise_iou(np.array([[0, 0, 4, 4]]), np.array([[2, 2, 6, 6], [0, 0, 0, 0]])),
                               [[4 / 28, 0.0]])
    rng = np.random.default_rng(3)
    a, b = _random_boxes(rng, 7), _random_boxes(rng, 5)
    expected = [[_iou_loop(x, y) for y in b] for x in a]
    np.testing.assert_allclose(pairwise_iou(a, b), expected, rtol=1e-12)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("thr", [0.0, 0.3, 0.7, 1.0])
def test_nms_matches_loop(seed, thr):
    rng = np.random.default_rng(seed)
    boxes, scores = _random_boxes(rng, 30), rng.uniform(size=30)
    assert sorted(nms(boxes, scores, thr).tolist()) == sorted(_nms_loop(boxes, scores, thr))


def test_density_counts_kept_boxes_inside_image():
    boxes = np.array([[0, 0, 4, 4], [0, 0, 4, 4.1], [10, 10, 30, 30], [4, 4, 8, 8]])
    scores = np.array([0.9, 0.8, 0.95, 0.2])
    dens = detections_to_density(boxes, scores, (16, 16), 0.5, 0.5)
    assert dens.shape == (16, 16)
    assert dens.sum() == 1.0  # box 2 is centred at (20, 20), outside; box 1 merged into box 0; box 3 below threshold
    assert dens[2, 2] == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_density_sum_matches_loop(seed):
    rng = np.random.default_rng(seed)
    boxes, scores = _random_boxes(rng, 40), rng.uniform(size=40)
    size = (48, 40)
    dens = detections_to_density(boxes, scores, size, 0.4, 0.5)
    inside = [i for i in range(40) if scores[i] > 0.4 and 0 <= (boxes[i, 0] + boxes[i, 2]) / 2 < size[0]
              and 0 <= (boxes[i, 1] + boxes[i, 3]) / 2 < size[1]]
    expected = len(_nms_loop(boxes[inside], scores[inside], 0.5))
    assert dens.sum() == expected


def test_threshold_is_strict_as_in_transformers():
    """transformers keeps ``score > threshold``; a score equal to the threshold is not counted."""
    from countboard.counting.models.detect_count import select_detections

    boxes = np.array([[0, 0, 4, 4], [8, 8, 12, 12]])
    kept, scores = select_detections(boxes, np.array([0.5, 0.75]), (16, 16), 0.5, 1.0)
    assert scores.tolist() == [0.75] and kept.tolist() == [[8.0, 8.0, 12.0, 12.0]]
    assert detections_to_density(boxes, np.array([0.5, 0.5]), (16, 16), 0.5, 1.0).sum() == 0


def test_docstring_examples():
    import doctest

    from countboard.counting.models import detect_count

    result = doctest.testmod(detect_count)
    assert result.attempted >= 4 and result.failed == 0
