"""Batched post-processing on the device: NMS, region labelling and one transfer per batch (CPU device)."""

import numpy as np
import pytest
import torch
from scipy import ndimage

from countboard.counting.models.clipseg import ClipSegCounter, regions_to_density_batch
from countboard.counting.models.detect_count import select_detections, select_detections_batched
from countboard.counting.models.owlv2 import Owlv2Counter
from countboard.counting.models.regions import finish_counts, region_counts

PROMPTS = ["red circle", "blue square", "apples"]


def _random_boxes(rng, n, k, side=50.0):
    centre = rng.uniform(-5, side + 5, (n, k, 2))
    half = rng.uniform(1, 12, (n, k, 2))
    boxes = np.concatenate([centre - half, centre + half], axis=-1)  # (y0, x0, y1, x1)
    scores = rng.uniform(0, 1, (n, k)).round(2)  # ties, as a stable sort must order them
    return boxes, scores


@pytest.mark.parametrize("steps", [1, 3, 8])
@pytest.mark.parametrize("nms_iou", [0.3, 0.5, 1.0])
def test_batched_selection_equals_the_per_pair_reference(steps, nms_iou):
    rng = np.random.default_rng(int(steps * 10 + nms_iou * 10))
    boxes, scores = _random_boxes(rng, 6, 40)
    sizes = np.array([[50, 50], [40, 60], [50, 50], [10, 10], [60, 30], [50, 50]], dtype=np.float64)
    order, keep, settled = select_detections_batched(torch.from_numpy(boxes), torch.from_numpy(scores),
                                                     torch.from_numpy(sizes), 0.4, nms_iou, steps=steps)
    if not bool(settled):
        order, keep, settled = select_detections_batched(torch.from_numpy(boxes), torch.from_numpy(scores),
                                                         torch.from_numpy(sizes), 0.4, nms_iou, steps=40)
    assert bool(settled)
    for n in range(len(boxes)):
        ref_boxes, ref_scores = select_detections(boxes[n], scores[n], tuple(sizes[n].astype(int)), 0.4, nms_iou)
        picked = order[n][keep[n]].numpy()
        np.testing.assert_array_equal(boxes[n][picked], ref_boxes)
        np.testing.assert_array_equal(scores[n][picked], ref_scores)


def test_a_long_suppression_chain_is_not_settled_after_few_steps():
    """Boxes in a row, each overlapping the next: greedy NMS keeps every other one, decided one step at a time."""
    k = 12
    boxes = np.array([[0, 3.0 * i, 10, 3.0 * i + 10] for i in range(k)])[None]
    scores = np.linspace(0.9, 0.5, k)[None]
    args = torch.from_numpy(boxes), torch.from_numpy(scores), torch.tensor([[10.0, 100.0]])
    _, _, settled = select_detections_batched(*args, 0.1, 0.3, steps=2)
    order, keep, settled_full = select_detections_batched(*args, 0.1, 0.3, steps=k)
    ref, _ = select_detections(boxes[0], scores[0], (10, 100), 0.1, 0.3)
    assert not bool(settled) and bool(settled_full)
    np.testing.assert_array_equal(boxes[0][order[0][keep[0]].numpy()], ref)


@pytest.mark.parametrize("seed", range(3))
def test_tensor_labelling_counts_equal_the_scipy_maps(seed):
    rng = np.random.default_rng(seed)
    probs = ndimage.gaussian_filter(rng.uniform(size=(4, 37, 53)), (0, 1.5, 1.5))
    probs = ((probs - probs.min()) / (probs.max() - probs.min())).astype(np.float32)
    probs[3] = probs[2]
    expected = regions_to_density_batch(probs, 0.55, 3).sum(axis=(1, 2))
    for force in (True, False):
        counts, settled, labels, mask = region_counts(torch.from_numpy(probs), 0.55, 3, steps=2,
                                                      force_tensor_ops=force)
        if not bool(settled):
            counts = finish_counts(torch.from_numpy(probs), labels, mask, 3, steps=2)
        np.testing.assert_allclose(counts.numpy(), expected, atol=1e-4)
    assert expected.sum() > 0


class _Syncs:
    """Counts the calls that wait for a device (``cpu``, ``item``, ``tolist``, ``bool`` of a tensor)."""

    def __init__(self, monkeypatch):
        self.n = 0
        for name in ("cpu", "item", "tolist", "__bool__"):
            real = getattr(torch.Tensor, name)

            def counted(*args, _real=real, **kwargs):
                self.n += 1
                return _real(*args, **kwargs)
            monkeypatch.setattr(torch.Tensor, name, counted)


@pytest.fixture(scope="module")
def owl(tiny_owlv2_dir):
    return Owlv2Counter(model_id=str(tiny_owlv2_dir), score_threshold=0.5)


@pytest.fixture(scope="module")
def clipseg(tiny_clipseg_dir):
    return ClipSegCounter(model_id=str(tiny_clipseg_dir), mask_threshold=0.5, min_region_frac=0.002)


@pytest.mark.parametrize("kind", ["owl", "clipseg"])
def test_counts_of_a_batch_leave_the_device_once(kind, request, make_items, monkeypatch):
    counter = request.getfixturevalue(kind)
    items = make_items(3, seed=21)
    feats = counter.encode_images(items)
    pairs = [(f, p) for f in feats for p in PROMPTS]
    counter._text(PROMPTS)  # prompt embeddings cached, as after the first batch
    expected = np.array([float(m.sum()) for m in counter.decode([f for f, _ in pairs], [p for _, p in pairs])])
    syncs = _Syncs(monkeypatch)
    counts = counter.decode_counts([f for f, _ in pairs], [p for _, p in pairs])
    assert syncs.n == 1
    np.testing.assert_allclose(counts, expected, atol=1e-3)
    assert counts.sum() > 0
