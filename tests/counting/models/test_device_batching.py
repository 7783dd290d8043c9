"""Batched post-processing on the device: NMS, region labelling and one transfer per batch (CPU device)."""

import functools

import numpy as np
import pytest
import torch
from scipy import ndimage

from countboard.counting.models import clipseg as clipseg_module
from countboard.counting.models import detect_count
from countboard.counting.models.clipseg import ClipSegCounter, regions_to_density_batch
from countboard.counting.models.detect_count import (
    fetch_selected,
    ranked_detections,
    select_detections,
    select_detections_batched,
)
from countboard.counting.models.owlv2 import Owlv2Counter
from countboard.counting.models.regions import finish_counts, region_counts

PROMPTS = ["red circle", "blue square", "apples"]


def _random_boxes(rng, n, k, side=50.0):
    centre = rng.uniform(-5, side + 5, (n, k, 2))
    half = rng.uniform(1, 12, (n, k, 2))
    boxes = np.concatenate([centre - half, centre + half], axis=-1)  # (y0, x0, y1, x1)
    scores = rng.uniform(0, 1, (n, k)).round(2)  # ties, as a stable sort must order them
    return boxes, scores


@pytest.mark.parametrize(("force_tensor_ops", "chunk"), [(True, 2 * 40 * 40), (False, 2 * 40 * 40), (False, 100)])
@pytest.mark.parametrize(("steps", "width"), [(1, 512), (3, 5), (8, 512), (8, 12)])
@pytest.mark.parametrize("nms_iou", [0.3, 0.5, 1.0])
def test_batched_selection_equals_the_per_pair_reference(steps, width, nms_iou, force_tensor_ops, chunk, monkeypatch):
    """Also with a narrow first pass (``width`` below the candidates of a pair) and small chunks of pairs; on the
    CPU's greedy path, all pairs at once (``chunk`` above their IoU matrices) and pair by pair (below)."""
    monkeypatch.setattr(detect_count, "NMS_CHUNK_ELEMENTS", chunk)
    rng = np.random.default_rng(int(steps * 10 + nms_iou * 10 + width))
    boxes, scores = _random_boxes(rng, 6, 40)
    sizes = np.array([[50, 50], [40, 60], [50, 50], [10, 10], [60, 30], [50, 50]], dtype=np.float64)
    args = torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(sizes), 0.4, nms_iou
    order, keep, settled, needed = select_detections_batched(*args, steps=steps, width=width,
                                                             force_tensor_ops=force_tensor_ops)
    assert int(needed) == max(len(select_detections(b, s, tuple(z.astype(int)), 0.4, 1.0)[0])
                              for b, s, z in zip(boxes, scores, sizes, strict=True))
    if not bool(settled):
        assert force_tensor_ops and (steps < 8 or width < int(needed))
        order, keep, settled, _ = select_detections_batched(*args, steps=int(needed), width=int(needed),
                                                            force_tensor_ops=force_tensor_ops)
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
    _, _, settled, _ = select_detections_batched(*args, 0.1, 0.3, steps=2, force_tensor_ops=True)
    order, keep, settled_full, _ = select_detections_batched(*args, 0.1, 0.3, steps=k, force_tensor_ops=True)
    ref, _ = select_detections(boxes[0], scores[0], (10, 100), 0.1, 0.3)
    assert not bool(settled) and bool(settled_full)
    np.testing.assert_array_equal(boxes[0][order[0][keep[0]].numpy()], ref)


@pytest.mark.parametrize(("k", "passes"), [(6, 1), (40, 2), (200, 3)])
def test_fetch_selected_widens_and_lengthens_until_settled(k, passes, monkeypatch):
    """A suppression chain of ``k`` boxes (greedy NMS keeps every other one, one decision per round) beside a pair
    with few candidates: 8 rounds, then 64, then as many as candidates; each pass read in one transfer."""
    monkeypatch.setattr(detect_count, "select_detections_batched",
                        functools.partial(select_detections_batched, force_tensor_ops=True))
    chain = np.array([[0, 3.0 * i, 10, 3.0 * i + 10] for i in range(k)])
    boxes = np.stack([chain, chain[::-1] + 1000.0])
    scores = np.stack([np.linspace(0.9, 0.5, k), np.r_[0.9, np.zeros(k - 1)]])
    sizes = np.array([[10.0, 3.0 * k + 10], [2000.0, 2000.0]])
    reads = []

    def fetch(b, s, order, keep):
        reads.append(1)
        return ranked_detections(b, s, order, keep)

    ranked, _, keep = fetch_selected(torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(sizes),
                                     0.1, 0.3, fetch)
    assert len(reads) == passes
    for n in range(2):
        ref, _ = select_detections(boxes[n], scores[n], tuple(sizes[n].astype(int)), 0.1, 0.3)
        np.testing.assert_array_equal(ranked[n][keep[n]], ref)


@pytest.mark.parametrize(("seed", "threshold", "min_region"), [(0, 0.55, 3), (1, 0.55, 3), (2, 0.55, 3),
                                                                (3, 0.55, 1), (4, 0.3, 12)])
def test_tensor_labelling_counts_equal_the_scipy_maps(seed, threshold, min_region):
    rng = np.random.default_rng(seed)
    probs = ndimage.gaussian_filter(rng.uniform(size=(4, 37, 53)), (0, 1.5, 1.5))
    probs = ((probs - probs.min()) / (probs.max() - probs.min())).astype(np.float32)
    probs[3] = probs[2]
    expected = regions_to_density_batch(probs, threshold, min_region).sum(axis=(1, 2))
    for force in (True, False):
        counts, settled, labels, mask = region_counts(torch.from_numpy(probs), threshold, min_region, steps=2,
                                                      force_tensor_ops=force)
        if not bool(settled):
            counts = finish_counts(torch.from_numpy(probs), labels, mask, threshold, min_region, steps=2)
        np.testing.assert_allclose(counts.numpy(), expected, atol=1e-4)
    assert expected.sum() > 0


def test_a_region_without_probability_mass_is_not_counted():
    """With a threshold of 0 every pixel is foreground; a map of zeros is one region with no mass: no count."""
    probs = np.zeros((3, 9, 11), dtype=np.float32)
    probs[1, 2:5, 3:6] = 0.4
    probs[2] = 0.2
    expected = regions_to_density_batch(probs, 0.0, 1).sum(axis=(1, 2))
    assert expected.round().tolist() == [0, 1, 1]
    for force in (True, False):
        counts, settled, labels, mask = region_counts(torch.from_numpy(probs), 0.0, 1, force_tensor_ops=force)
        if not bool(settled):
            counts = finish_counts(torch.from_numpy(probs), labels, mask, 0.0, 1)
        assert counts.tolist() == [0, 1, 1]


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


@pytest.mark.parametrize("force_tensor_ops", [False, True])
@pytest.mark.parametrize("kind", ["owl", "clipseg"])
def test_counts_of_a_batch_leave_the_device_once(kind, force_tensor_ops, request, make_items, monkeypatch):
    """On the CPU the selection and the labelling take the host's shortcuts; forced onto tensor ops they run as
    on a GPU, and still wait for the device once per batch."""
    if force_tensor_ops:
        monkeypatch.setattr(detect_count, "select_detections_batched",
                            functools.partial(select_detections_batched, force_tensor_ops=True))
        monkeypatch.setattr(clipseg_module, "region_counts",
                            functools.partial(clipseg_module.region_counts, force_tensor_ops=True))
    counter = request.getfixturevalue(kind)
    items = make_items(4, seed=21)  # two of one size: their maps are labelled together
    feats = counter.encode_images(items)
    pairs = [(f, p) for f in feats for p in PROMPTS]
    counter._text(PROMPTS)  # prompt embeddings cached, as after the first batch
    expected = np.array([float(m.sum()) for m in counter.decode([f for f, _ in pairs], [p for _, p in pairs])])
    syncs = _Syncs(monkeypatch)
    counts = counter.decode_counts([f for f, _ in pairs], [p for _, p in pairs])
    assert syncs.n == 1
    np.testing.assert_allclose(counts, expected, atol=1e-3)
    assert counts.sum() > 0


def _serpentine(h, w):
    """One long 8-connected path: every other row, joined at alternate ends."""
    m = np.zeros((h, w), dtype=bool)
    m[::2] = True
    for k, r in enumerate(range(1, h, 2)):
        m[r, w - 1 if k % 2 == 0 else 0] = True
    return m


def test_hooking_labels_long_and_noisy_regions_exactly_in_few_rounds():
    """A 1,000-pixel-long path, diagonal-only contacts and pixel noise: scipy's regions, settled in <= 8 rounds."""
    rng = np.random.default_rng(5)
    masks = np.stack([_serpentine(48, 40), np.eye(48, 40, dtype=bool) | np.eye(48, 40, k=7, dtype=bool),
                      rng.uniform(size=(48, 40)) < 0.45, np.zeros((48, 40), dtype=bool)])
    probs = torch.from_numpy(masks.astype(np.float32))
    counts, settled, labels, mask = region_counts(probs, 0.5, 1, steps=8, force_tensor_ops=True)
    assert bool(settled)
    expected = [ndimage.label(m, structure=np.ones((3, 3)))[1] for m in masks]
    assert counts.tolist() == expected
    assert expected[:2] == [1, 2] and expected[2] > 20
    roots = labels[:masks.size][torch.from_numpy(masks.reshape(-1))]
    assert len(torch.unique(roots)) == sum(expected)  # one root per region, over the stack
