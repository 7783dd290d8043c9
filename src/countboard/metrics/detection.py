"""Detection AP and AP50 of the boxes a counter outputs, by pycocotools' ``COCOeval`` (the maintained COCO scorer).

FSCD-147 (FSC-147 with a box per object on val/test) scores a counter that outputs boxes as a class-agnostic
detector: every image is one category, every detection and every ground-truth box belongs to it, and COCOeval runs
with ``maxDets = [900, 1000, 1100]`` (DAVE's ``utils/eval.py``, as Counting-DETR's: crowded images hold hundreds of
objects, COCO's default keeps 100). ``AP`` is the mean of COCOeval's precision over IoU 0.50:0.95, ``AP50`` at
IoU 0.50, both over all areas at the largest ``maxDets``, in percent (the papers' tables).

Boxes come in pixel ``(y0, x0, y1, x1)`` (the platform's convention, ``ImageItem.boxes``), scores in any range
(only their order matters). An image without detections counts its ground truth as missed; an image without ground
truth counts its detections as false positives.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence

import numpy as np

MAX_DETS = (900, 1000, 1100)


def _xywh(boxes) -> np.ndarray:
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.stack([b[:, 1], b[:, 0], b[:, 3] - b[:, 1], b[:, 2] - b[:, 0]], axis=1)


def coco_eval(pred_boxes: Sequence, pred_scores: Sequence, gt_boxes: Sequence, max_dets: Sequence[int] = MAX_DETS):
    """The evaluated and accumulated ``pycocotools.cocoeval.COCOeval`` of per-image detections and ground truth.

    Args:
        pred_boxes: Per image, ``(K, 4)`` detected boxes ``(y0, x0, y1, x1)`` in pixels.
        pred_scores: Per image, ``(K,)`` detection scores.
        gt_boxes: Per image, ``(M, 4)`` ground-truth boxes ``(y0, x0, y1, x1)``.
        max_dets: COCOeval's ``maxDets`` (three increasing limits; AP reads the last).
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if not len(pred_boxes) == len(pred_scores) == len(gt_boxes):
        raise ValueError(f"{len(pred_boxes)} images of boxes, {len(pred_scores)} of scores and {len(gt_boxes)} of "
                         "ground truth: give one entry per image in each")
    images, annotations, detections = [], [], []
    for i, (boxes, scores, truth) in enumerate(zip(pred_boxes, pred_scores, gt_boxes, strict=True), start=1):
        images.append({"id": i})
        for box in _xywh(truth):
            annotations.append({"id": len(annotations) + 1, "image_id": i, "category_id": 1, "bbox": box.tolist(),
                                "area": float(box[2] * box[3]), "iscrowd": 0})
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        boxes = _xywh(boxes)
        if len(scores) != len(boxes):
            raise ValueError(f"image {i - 1}: {len(boxes)} boxes and {len(scores)} scores")
        detections += [{"image_id": i, "category_id": 1, "bbox": b.tolist(), "score": float(s)}
                       for b, s in zip(boxes, scores, strict=True)]
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        truth = COCO()
        truth.dataset = {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "object"}]}
        truth.createIndex()
        found = truth.loadRes(detections) if detections else COCO()
        if not detections:
            found.dataset = {"images": images, "annotations": [], "categories": truth.dataset["categories"]}
            found.createIndex()
        evaluation = COCOeval(truth, found, iouType="bbox")
        evaluation.params.maxDets = [int(m) for m in max_dets]
        evaluation.evaluate()
        evaluation.accumulate()
    return evaluation


def _mean_precision(evaluation, iou: float | None) -> float:
    precision = evaluation.eval["precision"]  # (IoU, recall, category, area, maxDets); -1 where undefined
    if iou is not None:
        precision = precision[np.isclose(evaluation.params.iouThrs, iou)]
    area = evaluation.params.areaRngLbl.index("all")
    p = precision[:, :, :, area, -1]
    p = p[p > -1]
    return float(100.0 * p.mean()) if p.size else float("nan")


def detection_ap(pred_boxes: Sequence, pred_scores: Sequence, gt_boxes: Sequence,
                 max_dets: Sequence[int] = MAX_DETS) -> dict[str, float]:
    """``det_ap`` (IoU 0.50:0.95) and ``det_ap50`` (IoU 0.50) in percent; NaN when no image has ground truth.

    Example:
        >>> gt = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]])]
        >>> ap = detection_ap([np.array([[0, 0, 10, 10], [50, 50, 60, 60]])], [np.array([0.9, 0.8])], gt)
        >>> round(ap["det_ap"], 3), round(ap["det_ap50"], 3)  # precision 1 up to recall 0.5: 51 of 101 points
        (50.495, 50.495)
    """
    evaluation = coco_eval(pred_boxes, pred_scores, gt_boxes, max_dets)
    return {"det_ap": _mean_precision(evaluation, None), "det_ap50": _mean_precision(evaluation, 0.5)}
