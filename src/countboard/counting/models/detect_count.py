"""Shared pieces of the detect-then-count counters (OWLv2, Grounding DINO): box formats and non-maximum suppression.

Detections above a score threshold (strictly, as transformers' post-processing) that survive NMS become unit masses at their box centres
(``countboard.models.base.boxes_to_density``), so the count is the number of kept boxes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from countboard.models.base import boxes_to_density, check_one_prompt_each
from countboard.models.transfer import split_parts, to_host, to_host_later


def cxcywh_to_yxyx(boxes: np.ndarray, scale_hw: tuple[float, float]) -> np.ndarray:
    """Normalised ``(cx, cy, w, h)`` boxes to pixel ``(y0, x0, y1, x1)`` boxes.

    Args:
        boxes: ``(K, 4)`` boxes with coordinates in ``[0, 1]``.
        scale_hw: Pixel height and width that coordinate 1 stands for.

    Example:
        >>> cxcywh_to_yxyx(np.array([[0.5, 0.5, 0.5, 1.0]]), (10, 20)).tolist()
        [[0.0, 5.0, 10.0, 15.0]]
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    h, w = scale_hw
    cx, cy, bw, bh = boxes[:, 0] * w, boxes[:, 1] * h, boxes[:, 2] * w, boxes[:, 3] * h
    return np.stack([cy - bh / 2, cx - bw / 2, cy + bh / 2, cx + bw / 2], axis=1)


def pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(..., K, M)`` IoU matrices of ``(..., K, 4)`` and ``(..., M, 4)`` boxes ``(y0, x0, y1, x1)`` (leading
    dimensions, e.g. one per (image, prompt) pair, are matched).

    Example:
        >>> pairwise_iou(np.array([[0, 0, 2, 2]]), np.array([[0, 1, 2, 3], [5, 5, 6, 6]])).round(3).tolist()
        [[0.333, 0.0]]
    """
    a, b = np.asarray(a, dtype=np.float64)[..., :, None, :], np.asarray(b, dtype=np.float64)[..., None, :, :]
    ih = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    iw = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = ih * iw
    union = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1]) + (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Indices of the boxes kept by greedy non-maximum suppression, best score first.

    A box is dropped when its IoU with an already kept, higher-scoring box exceeds ``iou_threshold``;
    ``iou_threshold >= 1`` keeps every box. The IoU matrix of all boxes is computed once (K <= a few thousand).

    Example:
        >>> nms(np.array([[0, 0, 2, 2], [0, 0, 2, 2.2], [5, 5, 6, 6]]), np.array([0.9, 0.8, 0.7]), 0.5).tolist()
        [0, 2]
    """
    order = np.argsort(-np.asarray(scores), kind="stable")
    if iou_threshold >= 1 or len(order) < 2:
        return order
    iou = pairwise_iou(boxes[order], boxes[order])
    keep = np.ones(len(order), dtype=bool)
    for i in range(len(order) - 1):
        if keep[i]:
            keep[i + 1:] &= iou[i, i + 1:] <= iou_threshold
    return order[keep]


def select_detections(boxes: np.ndarray, scores: np.ndarray, size: tuple[int, int], score_threshold: float,
                      nms_iou: float) -> tuple[np.ndarray, np.ndarray]:
    """The counted detections: score above ``score_threshold``, centre inside the image, kept by NMS.

    The threshold is strict (``score > score_threshold``), as in transformers' ``post_process_object_detection``
    and ``post_process_grounded_object_detection``. Boxes whose centre falls outside the image (in the padding some
    processors add) are not counted.

    Args:
        boxes: ``(K, 4)`` pixel boxes ``(y0, x0, y1, x1)``.
        scores: ``(K,)`` detection scores in ``[0, 1]``.
        size: ``(H, W)`` of the image.
        score_threshold: A counted detection scores above it.
        nms_iou: IoU above which the lower-scoring of two overlapping detections is dropped.

    Returns:
        ``(boxes, scores)`` of the kept detections, best score first.

    Example:
        >>> boxes = np.array([[0, 0, 4, 4], [0, 0, 4, 4], [4, 4, 8, 8], [9, 9, 12, 12]])
        >>> kept, s = select_detections(boxes, np.array([0.9, 0.8, 0.5, 0.7]), (8, 8), 0.5, 0.5)
        >>> kept.tolist(), s.tolist()
        ([[0.0, 0.0, 4.0, 4.0]], [0.9])
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    cy, cx = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    sel = (scores > score_threshold) & (cy >= 0) & (cy < size[0]) & (cx >= 0) & (cx < size[1])
    boxes, scores = boxes[sel], scores[sel]
    keep = nms(boxes, scores, nms_iou)
    return boxes[keep], scores[keep]


def detections_to_density(boxes: np.ndarray, scores: np.ndarray, size: tuple[int, int], score_threshold: float,
                          nms_iou: float) -> np.ndarray:
    """Density map with unit mass at the centre of each detection kept by ``select_detections``.

    Example:
        >>> boxes = np.array([[0, 0, 4, 4], [0, 0, 4, 4], [4, 4, 8, 8]])
        >>> float(detections_to_density(boxes, np.array([0.9, 0.8, 0.1]), (8, 8), 0.5, 0.5).sum())
        1.0
    """
    kept, _ = select_detections(boxes, scores, size, score_threshold, nms_iou)
    return boxes_to_density(kept, None, size)


def boxes_from_cxcywh(boxes: torch.Tensor, scale_hw: torch.Tensor) -> torch.Tensor:
    """:func:`cxcywh_to_yxyx` on the device: ``(..., 4)`` normalised boxes and ``(..., 2)`` pixel ``(H, W)`` scales
    to float64 pixel ``(y0, x0, y1, x1)`` (the same float64 operations, so the same values)."""
    b = boxes.to(torch.float64)
    h, w = scale_hw[..., 0:1].to(torch.float64), scale_hw[..., 1:2].to(torch.float64)
    cx, cy, bw, bh = b[..., 0:1] * w, b[..., 1:2] * h, b[..., 2:3] * w, b[..., 3:4] * h
    return torch.cat([cy - bh / 2, cx - bw / 2, cy + bh / 2, cx + bw / 2], dim=-1)


def batched_iou(boxes: torch.Tensor) -> torch.Tensor:
    """``(N, K, K)`` IoU within each of ``N`` sets of ``(K, 4)`` boxes ``(y0, x0, y1, x1)`` (``pairwise_iou``'s
    arithmetic, in the boxes' dtype)."""
    a, b = boxes[:, :, None, :], boxes[:, None, :, :]
    ih = (torch.minimum(a[..., 2], b[..., 2]) - torch.maximum(a[..., 0], b[..., 0])).clamp(min=0)
    iw = (torch.minimum(a[..., 3], b[..., 3]) - torch.maximum(a[..., 1], b[..., 1])).clamp(min=0)
    inter = ih * iw
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    union = area[:, :, None] + area[:, None, :] - inter
    return torch.where(union > 0, inter / torch.where(union > 0, union, torch.ones_like(union)),
                       torch.zeros_like(union))


def nms_steps(keep: torch.Tensor, valid: torch.Tensor, suppresses: torch.Tensor, steps: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` rounds of the greedy-NMS fixpoint, and whether the last round changed nothing (a 0-d tensor).

    ``suppresses[n, j, i]`` is True when box ``j`` ranks before box ``i`` and overlaps it too much. One round keeps
    a valid box when no kept box suppresses it. Box ``i``'s decision depends only on boxes ranked before it, so
    after ``r`` rounds the first ``r`` decisions equal greedy NMS, and a round that changes nothing has reached
    greedy NMS for every box (its unique fixpoint; the "Cluster-NMS" iteration). Nothing here waits for the device.
    """
    weights = suppresses.to(torch.float32)
    settled = torch.zeros((), dtype=torch.bool, device=keep.device)
    for _ in range(steps):
        nxt = valid & ~(torch.bmm(keep.to(torch.float32)[:, None, :], weights)[:, 0] > 0)
        settled = (nxt == keep).all()
        keep = nxt
    return keep, settled


def candidates(boxes: torch.Tensor, scores: torch.Tensor, sizes: torch.Tensor, score_threshold: float
               ) -> torch.Tensor:
    """``(N, K)``: the boxes NMS decides on (score above the threshold, centre inside the image)."""
    cy, cx = (boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2
    h, w = sizes[:, 0:1].to(torch.float64), sizes[:, 1:2].to(torch.float64)
    return (scores.to(torch.float64) > score_threshold) & (cy >= 0) & (cy < h) & (cx >= 0) & (cx < w)


#: Candidates (valid boxes, best first) per pair that the first NMS pass on a device covers; a pair with more is
#: decided in a second pass as wide as the widest pair (rare for a trained detector at its threshold).
NMS_WIDTH = 512
#: Elements of the IoU matrices computed at once (pairs are taken in chunks below it: bounded memory).
NMS_CHUNK_ELEMENTS = 2**24


def select_detections_batched(boxes: torch.Tensor, scores: torch.Tensor, sizes: torch.Tensor,
                              score_threshold: float, nms_iou: float, steps: int = 8, width: int = NMS_WIDTH,
                              force_tensor_ops: bool = False
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`select_detections` of ``N`` pairs at once on their device, without waiting for it.

    The valid boxes (score above the threshold, centre in the image) come first in ``order``, so NMS only needs the
    first ``width`` ranked boxes of each pair: their IoU matrices are computed a chunk of pairs at a time, and greedy
    NMS is reached as the fixpoint of ``nms_steps``. On a CPU device the host is the device: greedy NMS runs pair by
    pair, each kept box against the boxes after it (the same float64 IoU arithmetic, so the same decisions), unless
    ``force_tensor_ops``.

    Args:
        boxes: ``(N, K, 4)`` float64 pixel boxes ``(y0, x0, y1, x1)``.
        scores: ``(N, K)`` scores.
        sizes: ``(N, 2)`` image ``(H, W)``.
        score_threshold, nms_iou: As in :func:`select_detections`.
        steps: Fixpoint rounds run before the caller looks.
        width: Ranked boxes per pair that NMS covers.

    Returns:
        ``order`` ``(N, K)`` (best score first, ties in index order as a stable sort), ``keep`` ``(N, K)`` in that
        order, ``settled`` (0-d bool) and ``needed`` (0-d: the most valid boxes of a pair). Read what is needed of
        them in one transfer; when ``settled`` is False (more valid boxes than ``width``, or a suppression chain
        longer than ``steps``) call again with ``steps=width=needed``, which always settles.
    """
    s = scores.to(torch.float64)
    valid = candidates(boxes, s, sizes, score_threshold)
    key = torch.where(valid, s, torch.full_like(s, -math.inf))
    order = torch.sort(key, dim=1, descending=True, stable=True).indices
    valid = valid.gather(1, order)
    counted = valid.sum(dim=1)
    needed = counted.max() if len(counted) else torch.zeros((), dtype=torch.long, device=boxes.device)
    settled = torch.ones((), dtype=torch.bool, device=boxes.device)
    if nms_iou >= 1 or boxes.shape[1] < 2:
        return order, valid, settled, needed
    if boxes.device.type == "cpu" and not force_tensor_ops:
        ranked = boxes.gather(1, order[..., None].expand(-1, -1, 4)).numpy()
        return order, torch.from_numpy(_greedy_keep(ranked, counted.numpy(), nms_iou)), settled, needed
    m = max(1, min(boxes.shape[1], int(width)))
    ranked = boxes.gather(1, order[:, :m, None].expand(-1, -1, 4))
    before = torch.ones((m, m), dtype=torch.bool, device=boxes.device).triu(1)
    keep = torch.zeros_like(valid)
    chunk = max(1, NMS_CHUNK_ELEMENTS // (m * m))
    for a in range(0, len(boxes), chunk):
        first = valid[a:a + chunk, :m]
        suppresses = (batched_iou(ranked[a:a + chunk]) > nms_iou) & before & first[:, :, None]
        kept, done = nms_steps(first, first, suppresses, steps)
        keep[a:a + chunk, :m] = kept
        settled = settled & done
    return order, keep, settled & (needed <= m), needed


def _greedy_keep(ranked: np.ndarray, counted: np.ndarray, nms_iou: float) -> np.ndarray:
    """Greedy NMS of the first ``counted[n]`` boxes of each ``ranked[n]`` (best first): ``(N, K)`` kept flags, with
    ``pairwise_iou``'s float64 arithmetic.

    While the IoU matrices of all pairs fit in ``NMS_CHUNK_ELEMENTS``, they are computed at once and the greedy
    decisions run over the candidates' ranks for all pairs together; beyond that, pair by pair, each kept box
    compared with the boxes after it (work: kept boxes x candidates, not a full matrix)."""
    n = len(ranked)
    keep = np.zeros(ranked.shape[:2], dtype=bool)
    m = int(counted.max()) if n else 0
    if m == 0:
        return keep
    if n * m * m <= NMS_CHUNK_ELEMENTS:
        overlaps = pairwise_iou(ranked[:, :m], ranked[:, :m]) > nms_iou
        alive = np.arange(m)[None, :] < counted[:, None]
        for i in range(m - 1):
            alive[:, i + 1:] &= ~(alive[:, i:i + 1] & overlaps[:, i, i + 1:])
        keep[:, :m] = alive
        return keep
    for p, k in enumerate(counted.tolist()):
        b = ranked[p, :k]
        alive = np.ones(k, dtype=bool)
        for i in range(k - 1):
            if alive[i]:
                alive[i + 1:] &= pairwise_iou(b[i:i + 1], b[i + 1:])[0] <= nms_iou
        keep[p, :k] = alive
    return keep


def ranked_detections(boxes: torch.Tensor, scores: torch.Tensor, order: torch.Tensor, keep: torch.Tensor
                      ) -> list[torch.Tensor]:
    """Boxes and float64 scores in ``order`` (best first), and ``keep``: what ``detect`` reads of a selection."""
    return [boxes.gather(1, order[..., None].expand(-1, -1, 4)), scores.gather(1, order).to(torch.float64), keep]


class ReadLater:
    """A ``fetch`` for :func:`fetch_selected` that asks for its tensors to be read later: ``fetch_selected`` then
    starts their copy to the host and returns a function that reads them (``models.transfer.to_host_later``)."""

    def __init__(self, fetch):
        self.fetch = fetch

    def __call__(self, boxes, scores, order, keep):
        return self.fetch(boxes, scores, order, keep)


def fetch_selected(boxes: torch.Tensor, scores: torch.Tensor, sizes: torch.Tensor, score_threshold: float,
                   nms_iou: float, fetch, steps: int = 8) -> list[np.ndarray]:
    """:func:`select_detections_batched` of every pair, then ``fetch(boxes, scores, order, keep)`` read in one
    transfer. When the selection had not settled (more candidates than its first width, or a suppression chain
    longer than its rounds), it runs again as wide as the most candidates of a pair, with eight times the rounds
    (at most as many as candidates, which always settles), and is read again. With a :class:`ReadLater` fetch,
    returns a function that reads the results (and runs the wider selection only if needed)."""
    order, keep, settled, needed = select_detections_batched(boxes, scores, sizes, score_threshold, nms_iou,
                                                             steps=steps)
    if isinstance(fetch, ReadLater):
        read = to_host_later([settled, needed, *fetch(boxes, scores, order, keep)])

        def later() -> list[np.ndarray]:
            host = read.result()
            if bool(host[0]):
                return host[2:]
            return fetch_selected(boxes, scores, sizes, score_threshold, nms_iou, fetch.fetch, steps)

        return later
    host = to_host([settled, needed, *fetch(boxes, scores, order, keep)])
    while not bool(host[0]):
        n = max(int(host[1]), 1)
        steps = min(n, 8 * steps)
        order, keep, settled, needed = select_detections_batched(boxes, scores, sizes, score_threshold, nms_iou,
                                                                 steps=steps, width=n)
        host = to_host([settled, needed, *fetch(boxes, scores, order, keep)])
    return host[2:]


def centre_maps(boxes: torch.Tensor, order: torch.Tensor, keep: torch.Tensor, sizes: list[tuple[int, int]]
                ) -> list[torch.Tensor]:
    """:func:`boxes_to_density` of each pair's kept detections on the device: ``(H, W)`` float32 maps with unit
    mass at the centre pixel of each kept box (boxes ``(N, K, 4)``, ``order`` and ``keep`` of
    :func:`select_detections_batched`, one image size per pair). Nothing here waits for the device."""
    ranked = boxes.gather(1, order[..., None].expand(-1, -1, 4))
    cy = ((ranked[..., 0] + ranked[..., 2]) / 2).long()  # truncation, as numpy's astype(int)
    cx = ((ranked[..., 1] + ranked[..., 3]) / 2).long()
    weights = keep.to(torch.float32)  # every box is added, the dropped ones with weight 0: no boolean indexing
    out = []
    for n, (h, w) in enumerate(sizes):
        dens = torch.zeros((h, w), dtype=torch.float32, device=boxes.device)
        out.append(dens.index_put_((cy[n].clamp(0, h - 1), cx[n].clamp(0, w - 1)), weights[n], accumulate=True))
    return out


class DetectionDecoding:
    """``detect``, ``decode_counts``, ``decode`` and ``reduce_maps`` of a detector whose ``_kept(features, prompts, fetch)`` reads
    ``fetch(boxes, scores, order, keep)`` of every pair's selection in one transfer (:func:`fetch_selected`)."""

    def detect(self, features, prompts) -> list[tuple[np.ndarray, np.ndarray]]:
        """Counted detections per (image, prompt) pair: pixel boxes ``(y0, x0, y1, x1)`` and scores, best first."""
        ranked_boxes, ranked_scores, keep = self._kept(features, prompts, ranked_detections)
        return [(b[k], s[k]) for b, s, k in zip(ranked_boxes, ranked_scores, keep, strict=True)]

    def decode_counts(self, features, prompts) -> np.ndarray:
        """The number of counted detections of each pair (one transfer for the batch)."""
        if not prompts:
            return np.zeros(0)
        (counts,) = self._kept(features, prompts, lambda b, s, o, keep: [keep.sum(dim=1)])
        return counts.astype(np.float64)

    def decode_counts_later(self, features, prompts):
        """``Counter.decode_counts_later``: every pair's selection is queued and the copy of its counts to the host
        started (:class:`ReadLater`); the returned function reads them."""
        if not prompts:
            return lambda: np.zeros(0)
        read = self._kept(features, prompts, ReadLater(lambda b, s, o, keep: [keep.sum(dim=1)]))
        return lambda: read()[0].astype(np.float64)

    def decode(self, features, prompts) -> list[np.ndarray]:
        """Unit mass at the centre of each counted detection."""
        return [boxes_to_density(boxes, None, feat.size)
                for feat, (boxes, _) in zip(features, self.detect(features, prompts), strict=True)]

    def reduce_maps(self, items, prompts, reduce) -> list[list[np.ndarray]]:
        """``Counter.reduce_maps`` with ``decode``'s maps made on the device (:func:`centre_maps`): the selection
        and every pair's reductions are read in one transfer (:func:`fetch_selected`)."""
        check_one_prompt_each(items, prompts)
        if not prompts:
            return []
        features = self.encode_images(items)
        lengths: list[int] = []

        def fetch(boxes, scores, order, keep):
            maps = centre_maps(boxes, order, keep, [feat.size for feat in features])
            parts = [list(reduce(i, m)) for i, m in enumerate(maps)]
            lengths[:] = [len(part) for part in parts]
            return [t for part in parts for t in part]

        return split_parts(self._kept(features, prompts, fetch), lengths)
