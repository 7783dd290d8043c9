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


def mean_precision(evaluation, iou: float | None) -> float:
    """COCOeval's mean precision at IoU ``iou`` (all of them when None), all areas, the largest maxDets, in %."""
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
    return {"det_ap": mean_precision(evaluation, None), "det_ap50": mean_precision(evaluation, 0.5)}


def detection_ap_units(evaluation) -> dict:
    """``det_ap`` and ``det_ap50`` as bootstrap unit statistics over the images of an evaluated ``COCOeval``.

    COCOeval matches each image's detections to its ground truth on its own (``evaluate``); only ``accumulate``
    pools the images, ranking every detection by score. A resample of the images therefore keeps each image's
    matches and weighs its detections and ground-truth boxes by how often the image was drawn, at their place in
    the one ranking of all detections (score, then image, then the image's order, as ``accumulate``'s mergesort):
    cumulative true and false positives, precision made monotone from the right, read at COCO's 101 recall
    thresholds (0 past the last recall reached), averaged over the IoU thresholds. Drawn once each, this is
    ``accumulate`` itself: ``value()`` equals ``detection_ap``'s numbers (tested).

    Args:
        evaluation: ``coco_eval``'s evaluated ``COCOeval`` (one category).

    Returns:
        ``{"det_ap": UnitStatistic, "det_ap50": UnitStatistic}``, one unit per image of the evaluation.
    """
    from countboard.metrics.bootstrap import UnitStatistic

    p = evaluation.params
    n = len(p.imgIds)
    area = p.areaRngLbl.index("all")  # evalImgs: category, then area range, then image
    n_thresholds = len(p.iouThrs)
    owner, scores, tps, fps = [], [], [], []
    truth = np.zeros(n)
    for i in range(n):
        e = evaluation.evalImgs[area * n + i]
        if e is None:
            continue
        keep = slice(0, p.maxDets[-1])
        matched = np.asarray(e["dtMatches"])[:, keep].astype(bool)
        ignored = np.asarray(e["dtIgnore"])[:, keep].astype(bool)
        scores.append(np.asarray(e["dtScores"], np.float64)[keep])
        owner.append(np.full(len(scores[-1]), i))
        tps.append(matched & ~ignored)
        fps.append(~matched & ~ignored)
        truth[i] = np.count_nonzero(np.asarray(e["gtIgnore"]) == 0)
    if scores:
        order = np.argsort(-np.concatenate(scores), kind="mergesort")
        owner = np.concatenate(owner)[order]
        tps = np.concatenate(tps, axis=1)[:, order].astype(np.float64)
        fps = np.concatenate(fps, axis=1)[:, order].astype(np.float64)
    else:
        owner, tps, fps = np.zeros(0, np.int64), np.zeros((n_thresholds, 0)), np.zeros((n_thresholds, 0))
    thresholds = np.asarray(p.recThrs, np.float64)
    at_50 = np.isclose(p.iouThrs, 0.5)
    # resamples per block: a block's cumulative sums hold about 4M values
    block = max(1, 4_000_000 // max(1, n_thresholds * max(1, len(owner))))

    def precision(idx: np.ndarray, ious: np.ndarray) -> np.ndarray:
        """COCO's interpolated precision ``(B, T, R)`` of each resample ``idx[b]`` (image indices) at the IoU
        thresholds selected by the mask ``ious``."""
        b_all, hit, miss = len(idx), tps[ious], fps[ious]
        out = np.zeros((b_all, len(hit), len(thresholds)))
        rows = np.arange(b_all)
        drawn = np.bincount((idx + n * rows[:, None]).ravel(), minlength=b_all * n).reshape(b_all, n)
        drawn = drawn.astype(np.float64)
        positives = drawn @ truth
        out[positives == 0] = np.nan
        for start in range(0, b_all, block):
            w = drawn[start:start + block][:, owner]  # (b, D): each detection counted as often as its image
            tp = np.cumsum(w[:, None, :] * hit[None], axis=2)
            fp = np.cumsum(w[:, None, :] * miss[None], axis=2)
            pos = positives[start:start + block]
            with np.errstate(invalid="ignore", divide="ignore"):
                recall = tp / pos[:, None, None]
            pr = tp / (fp + tp + np.spacing(1))
            pr = np.maximum.accumulate(pr[:, :, ::-1], axis=2)[:, :, ::-1]
            for b in range(len(w)):
                if pos[b] == 0:
                    continue
                for t in range(len(hit)):
                    at = np.searchsorted(recall[b, t], thresholds, side="left")
                    reached = at < recall.shape[2]
                    out[start + b, t, reached] = pr[b, t, at[reached]]
        return out

    def ap(idx: np.ndarray) -> np.ndarray:
        return 100.0 * precision(idx, np.ones(n_thresholds, bool)).mean(axis=(1, 2))

    def ap50(idx: np.ndarray) -> np.ndarray:
        return 100.0 * precision(idx, at_50).mean(axis=(1, 2))

    units = np.arange(n)  # gathered by the bootstrap into the resamples' image indices
    return {"det_ap": UnitStatistic((units,), ap), "det_ap50": UnitStatistic((units,), ap50)}
