"""Detection AP/AP50 (pycocotools' COCOeval, FSCD-147's maxDets): hand-computed cases, and equal to a direct
implementation of COCO's rule (greedy matching by score, 101-point interpolated precision) on generated boxes."""

from __future__ import annotations

import numpy as np
import pytest

from countboard.metrics.detection import detection_ap

RECALLS = np.linspace(0.0, 1.0, 101)
IOUS = np.linspace(0.5, 0.95, 10)


def iou_yxyx(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    y0, x0 = np.maximum(a[:, None, 0], b[None, :, 0]), np.maximum(a[:, None, 1], b[None, :, 1])
    y1, x1 = np.minimum(a[:, None, 2], b[None, :, 2]), np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(y1 - y0, 0, None) * np.clip(x1 - x0, 0, None)
    area = lambda z: (z[:, 2] - z[:, 0]) * (z[:, 3] - z[:, 1])  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def direct_ap(preds, scores, truths, threshold: float) -> float:
    """COCO's AP at one IoU threshold for one class, written from its definition."""
    matched_scores, hits = [], []
    n_truth = sum(len(t) for t in truths)
    for boxes, s, truth in zip(preds, scores, truths, strict=True):
        order = np.argsort(-s, kind="mergesort")
        boxes, s = boxes[order], s[order]
        taken = np.zeros(len(truth), bool)
        overlaps = iou_yxyx(boxes, truth) if len(boxes) and len(truth) else np.zeros((len(boxes), len(truth)))
        for k in range(len(boxes)):
            best, best_iou = -1, min(threshold, 1 - 1e-10)
            for g in range(len(truth)):
                if not taken[g] and overlaps[k, g] >= best_iou:
                    best, best_iou = g, overlaps[k, g]
            if best >= 0:
                taken[best] = True
            matched_scores.append(s[k])
            hits.append(best >= 0)
    if n_truth == 0:
        return float("nan")
    order = np.argsort(-np.array(matched_scores), kind="mergesort")
    tp = np.cumsum(np.array(hits, bool)[order])
    fp = np.cumsum(~np.array(hits, bool)[order])
    recall = tp / n_truth
    precision = tp / np.maximum(tp + fp, np.spacing(1))
    envelope = np.maximum.accumulate(precision[::-1])[::-1] if len(precision) else precision
    at = np.searchsorted(recall, RECALLS, side="left")
    return float(np.mean([envelope[i] if i < len(envelope) else 0.0 for i in at]))


def test_hand_computed_cases():
    truth = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]], float)]
    # both found, best first: precision 1 at every recall
    perfect = detection_ap([truth[0][::-1]], [np.array([0.9, 0.8])], truth)
    assert perfect == {"det_ap": 100.0, "det_ap50": 100.0}
    # a false positive ranked first: precision 1/2 at recall 1/2, 2/3 at recall 1; the envelope is 2/3 throughout
    boxes = np.array([[50, 50, 60, 60], [0, 0, 10, 10], [20, 20, 30, 30]], float)
    ap = detection_ap([boxes], [np.array([0.9, 0.8, 0.7])], truth)
    assert ap["det_ap50"] == pytest.approx(100 * 2 / 3)
    # a box shifted by 2 of 10 pixels: IoU 8x10 / (12x10) = 2/3, a hit at 0.50, 0.55, 0.60 and 0.65 only
    shifted = detection_ap([np.array([[2, 0, 12, 10]], float)], [np.array([1.0])], [truth[0][:1]])
    assert shifted["det_ap50"] == pytest.approx(100.0) and shifted["det_ap"] == pytest.approx(40.0)
    # nothing detected: AP 0; no ground truth anywhere: undefined
    assert detection_ap([np.zeros((0, 4))], [np.zeros(0)], truth) == {"det_ap": 0.0, "det_ap50": 0.0}
    assert np.isnan(detection_ap([boxes], [np.ones(3)], [np.zeros((0, 4))])["det_ap"])


def test_images_without_truth_count_their_detections_as_false_positives():
    truth = [np.array([[0, 0, 10, 10]], float), np.zeros((0, 4))]
    preds = [np.array([[0, 0, 10, 10]], float), np.array([[5, 5, 9, 9]], float)]
    # the false positive ranks above the hit: precision 1/2 at recall 1
    assert detection_ap(preds, [np.array([0.5]), np.array([0.9])], truth)["det_ap50"] == pytest.approx(50.0)
    assert detection_ap(preds, [np.array([0.9]), np.array([0.5])], truth)["det_ap50"] == pytest.approx(100.0)


def _scene(rng, n_truth: int, n_pred: int):
    y0, x0 = rng.uniform(0, 200, n_truth), rng.uniform(0, 200, n_truth)
    h, w = rng.uniform(5, 30, n_truth), rng.uniform(5, 30, n_truth)
    truth = np.stack([y0, x0, y0 + h, x0 + w], 1)
    # detections: jittered copies of some objects (overlaps of every level) and spurious boxes
    src = truth[rng.integers(0, n_truth, n_pred)] if n_truth else rng.uniform(0, 200, (n_pred, 4))
    jitter = rng.normal(0, rng.uniform(0.5, 6), (n_pred, 4))
    pred = src + jitter
    spurious = rng.random(n_pred) < 0.3
    pred[spurious, :2] = rng.uniform(0, 200, (spurious.sum(), 2))
    pred[spurious, 2:] = pred[spurious, :2] + rng.uniform(5, 30, (spurious.sum(), 2))
    pred = np.concatenate([np.minimum(pred[:, :2], pred[:, 2:]), np.maximum(pred[:, :2], pred[:, 2:])], axis=1)
    return pred, rng.permutation(n_pred) / n_pred + rng.uniform(0, 1e-3, n_pred), truth


@pytest.mark.parametrize("seed", range(4))
def test_equals_a_direct_implementation_on_generated_boxes(seed):
    rng = np.random.default_rng(seed)
    scenes = [_scene(rng, int(rng.integers(0, 25)), int(rng.integers(0, 30))) for _ in range(6)]
    preds, scores, truths = (list(x) for x in zip(*scenes, strict=True))
    got = detection_ap(preds, scores, truths)
    direct = [direct_ap(preds, scores, truths, t) for t in IOUS]
    assert got["det_ap50"] == pytest.approx(100 * direct[0], abs=1e-9)
    assert got["det_ap"] == pytest.approx(100 * np.mean(direct), abs=1e-9)


def test_more_detections_than_coco_s_default_limit_all_count():
    """FSCD-147's maxDets (1100): an image with 300 objects, all found, has AP 100 (COCO's 100 would cap recall)."""
    rng = np.random.default_rng(0)
    yx = rng.permutation(400)[:300]
    truth = np.stack([yx // 20 * 12.0, yx % 20 * 12.0], 1)
    truth = np.concatenate([truth, truth + 10], 1)
    assert detection_ap([truth], [rng.random(300)], [truth])["det_ap"] == pytest.approx(100.0)


def test_mismatched_inputs_say_what_to_give():
    with pytest.raises(ValueError, match="one entry per image"):
        detection_ap([np.zeros((0, 4))], [], [np.zeros((0, 4))])
    with pytest.raises(ValueError, match="image 0: 1 boxes and 2 scores"):
        detection_ap([np.zeros((1, 4))], [np.zeros(2)], [np.zeros((1, 4))])


def _scenes(seed: int, n: int = 7):
    rng = np.random.default_rng(seed)
    scenes = [_scene(rng, int(rng.integers(0, 25)), int(rng.integers(0, 30))) for _ in range(n)]
    return (list(x) for x in zip(*scenes, strict=True))


@pytest.mark.parametrize("seed", range(3))
def test_the_units_drawn_once_each_are_coco_eval_s_numbers(seed):
    from countboard.metrics.detection import coco_eval, detection_ap_units

    preds, scores, truths = _scenes(seed)
    scores = [np.round(s, 1) for s in scores]  # ties within and across images: ranked as accumulate ranks them
    units = detection_ap_units(coco_eval(preds, scores, truths))
    got = detection_ap(preds, scores, truths)
    assert units["det_ap"].value() == pytest.approx(got["det_ap"], abs=1e-12)
    assert units["det_ap50"].value() == pytest.approx(got["det_ap50"], abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_a_resample_of_the_images_scores_as_coco_eval_on_those_images(seed):
    """With distinct scores, a resample (images drawn twice or not at all) is COCOeval run on the drawn images."""
    from countboard.metrics.detection import coco_eval, detection_ap_units

    preds, scores, truths = _scenes(seed)
    units = detection_ap_units(coco_eval(preds, scores, truths))
    idx = np.random.default_rng(seed + 10).integers(0, len(preds), size=(4, len(preds)))
    ap, ap50 = units["det_ap"].of_resamples(idx), units["det_ap50"].of_resamples(idx)
    for b, drawn in enumerate(idx):
        want = detection_ap([preds[i] for i in drawn], [scores[i] for i in drawn], [truths[i] for i in drawn])
        assert ap[b] == pytest.approx(want["det_ap"], abs=1e-9, nan_ok=True)
        assert ap50[b] == pytest.approx(want["det_ap50"], abs=1e-9, nan_ok=True)


def test_the_interval_of_ap_holds_it_and_a_resample_without_truth_is_undefined():
    from countboard.metrics import bootstrap
    from countboard.metrics.detection import coco_eval, detection_ap_units

    preds, scores, truths = _scenes(1)
    units = detection_ap_units(coco_eval(preds, scores, truths))
    bounds = bootstrap.interval_metrics(units)
    assert bounds["det_ap__low"] < units["det_ap"].value() < bounds["det_ap__high"]
    assert bounds["det_ap50__low"] < units["det_ap50"].value() < bounds["det_ap50__high"]
    empty = np.zeros((0, 4))
    units = detection_ap_units(coco_eval([preds[0], empty], [scores[0], np.zeros(0)], [empty, truths[1]]))
    assert np.isnan(units["det_ap"].of_resamples(np.array([[0, 0]])))[0]  # only the image without ground truth
    assert units["det_ap"].of_resamples(np.array([[1, 1]]))[0] == 0.0  # ground truth, no detection: missed
