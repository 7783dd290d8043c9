import numpy as np
import pytest
import torch

from countboard.counting.models.grounding_dino import DinoImageFeatures, GroundingDinoCounter

PROMPTS = ["red circle", "blue square", "Apples"]


def _iou(a, b):
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ih * iw
    return ih * iw / union if union > 0 else 0.0


def _direct_count(counter, item, prompt, threshold, nms_iou):
    """The unmodified model on (image, one prompt), HF-style box scores, then greedy NMS in plain loops."""
    inputs = counter.processor(images=item.image, text=prompt.lower() + ".", return_tensors="pt")
    with torch.no_grad():
        out = counter.model(**inputs)
    scores = torch.sigmoid(out.logits[0]).max(dim=-1).values.numpy()
    h, w = item.size
    cands = []
    for s, (cx, cy, bw, bh) in zip(scores, out.pred_boxes[0].numpy(), strict=True):
        box = ((cy - bh / 2) * h, (cx - bw / 2) * w, (cy + bh / 2) * h, (cx + bw / 2) * w)
        if s > threshold and 0 <= cy * h < h and 0 <= cx * w < w:
            cands.append((s, box))
    kept = []
    for _, b in sorted(cands, key=lambda c: -c[0]):
        if all(_iou(b, k) <= nms_iou for k in kept):
            kept.append(b)
    return len(kept)


@pytest.fixture(scope="module")
def counter(tiny_grounding_dino_dir):
    return GroundingDinoCounter(model_id=str(tiny_grounding_dino_dir), box_threshold=0.6, text_threshold=0.25,
                                nms_iou=0.5, prompt_batch_size=3)


def test_counts_match_unmodified_model_per_prompt(counter, make_items):
    items = make_items(1, seed=7)
    feats = counter.encode_images(items)
    pairs = [(i, p) for i in range(len(items)) for p in PROMPTS]
    maps = counter.decode([feats[i] for i, _ in pairs], [p for _, p in pairs])
    counts = [float(m.sum()) for m in maps]
    expected = [_direct_count(counter, items[i], p, 0.6, 0.5) for i, p in pairs]
    assert counts == expected
    assert sum(counts) > 0
    assert all(m.shape == items[i].size and m.dtype == np.float32 for (i, _), m in zip(pairs, maps, strict=True))


def test_backbone_runs_once_per_image(counter, make_items):
    calls = []
    inner = counter._backbone.inner
    handle = inner.register_forward_hook(lambda *a: calls.append(1))
    try:
        feats = counter.encode_images(make_items(2, seed=8))
        assert len(calls) == 2
        counter.decode([feats[0]] * len(PROMPTS) + [feats[1]] * len(PROMPTS), PROMPTS * 2)
    finally:
        handle.remove()
    assert len(calls) == 2  # decoding reuses the cached backbone output


def _processor_features(counter, items):
    """The host path: the processor on each image, then the backbone (what ``encode_images`` did before)."""
    feats = []
    with torch.inference_mode():
        for it in items:
            pv = counter.processor.image_processor(images=it.image, return_tensors="pt")["pixel_values"]
            maps, positions = counter._backbone.inner(pv, torch.ones((1, *pv.shape[-2:]), dtype=torch.long))
            feats.append(DinoImageFeatures(pv, list(maps), list(positions), it.size))
    return feats


def test_device_preprocessing_equals_the_processor_path(counter, make_items):
    """Pixels resized on the device (same-size images in one batch) give the processor's pixels and backbone
    output bit for bit, hence the same boxes, scores and counts."""
    items = make_items(4, seed=14, sizes=((40, 64), (300, 517), (40, 64), (64, 48)))
    feats, ref = counter.encode_images(items), _processor_features(counter, items)
    for f, r in zip(feats, ref, strict=True):
        torch.testing.assert_close(f.pixel_values, r.pixel_values, rtol=0, atol=0)
        for (fm, fk), (rm, rk) in zip(f.maps, r.maps, strict=True):
            torch.testing.assert_close(fm, rm, rtol=0, atol=0)
            torch.testing.assert_close(fk, rk, rtol=0, atol=0)
    pairs = [(i, p) for i in range(len(items)) for p in PROMPTS]
    found = counter.detect([feats[i] for i, _ in pairs], [p for _, p in pairs])
    expected = counter.detect([ref[i] for i, _ in pairs], [p for _, p in pairs])
    for (boxes, scores), (ref_boxes, ref_scores) in zip(found, expected, strict=True):
        np.testing.assert_array_equal(boxes, ref_boxes)
        np.testing.assert_array_equal(scores, ref_scores)
    assert sum(len(s) for _, s in found) > 0  # the counts are the numbers of kept boxes


def test_text_threshold_above_box_threshold_is_the_effective_threshold(counter, make_items):
    item = make_items(1, seed=9)[0]
    counter.text_threshold = 0.8
    try:
        counts = counter.count([item] * 2, PROMPTS[:2]).tolist()
    finally:
        counter.text_threshold = 0.25
    assert counts == [_direct_count(counter, item, p, 0.8, 0.5) for p in PROMPTS[:2]]


def _library_detections(counter, item, prompt, box_threshold, text_threshold):
    """transformers' own path: processor, full forward, ``post_process_grounded_object_detection``."""
    inputs = counter.processor(images=item.image, text=prompt.lower() + ".", return_tensors="pt")
    with torch.no_grad():
        out = counter.model(**inputs)
    res = counter.processor.post_process_grounded_object_detection(
        out, inputs["input_ids"], threshold=box_threshold, text_threshold=text_threshold,
        target_sizes=[item.size])[0]
    return res["boxes"].numpy(), res["scores"].numpy(), res["text_labels"]


def test_detections_equal_post_process_grounded_object_detection(counter, make_items):
    """Same boxes and scores as transformers when text_threshold <= box_threshold and NMS is off; the adapter only
    drops boxes centred outside the image (documented in docs/counters.md)."""
    counter.nms_iou = 1.0
    n_lib = 0
    try:
        for item in make_items(2, seed=12):
            feats = counter.encode_images([item])
            found = counter.detect(feats * len(PROMPTS), PROMPTS)
            for prompt, (boxes, scores) in zip(PROMPTS, found, strict=True):
                lib_boxes, lib_scores, _ = _library_detections(counter, item, prompt, 0.6, 0.25)
                cx, cy = (lib_boxes[:, 0] + lib_boxes[:, 2]) / 2, (lib_boxes[:, 1] + lib_boxes[:, 3]) / 2
                inside = (cy >= 0) & (cy < item.size[0]) & (cx >= 0) & (cx < item.size[1])
                order = np.argsort(-lib_scores[inside], kind="stable")
                np.testing.assert_allclose(scores, lib_scores[inside][order], rtol=1e-5)
                np.testing.assert_allclose(boxes[:, [1, 0, 3, 2]], lib_boxes[inside][order], atol=1e-3)
                assert counter.count([item], [prompt])[0] == inside.sum()
                n_lib += len(lib_scores)
    finally:
        counter.nms_iou = 0.5
    assert n_lib > 0


def test_text_threshold_above_box_threshold_counts_only_named_boxes(counter, make_items):
    """Intended difference: transformers keeps a box above box_threshold even when no token passes
    text_threshold (its label is then empty); the adapter counts only boxes that carry the prompt's label."""
    item = make_items(1, seed=13)[0]
    counter.nms_iou, counter.text_threshold = 1.0, 0.8
    try:
        boxes, scores = counter.detect(counter.encode_images([item]), [PROMPTS[0]])[0]
    finally:
        counter.nms_iou, counter.text_threshold = 0.5, 0.25
    lib_boxes, lib_scores, _ = _library_detections(counter, item, PROMPTS[0], 0.8, 0.8)
    cx, cy = (lib_boxes[:, 0] + lib_boxes[:, 2]) / 2, (lib_boxes[:, 1] + lib_boxes[:, 3]) / 2
    inside = (cy >= 0) & (cy < item.size[0]) & (cx >= 0) & (cx < item.size[1])
    np.testing.assert_allclose(np.sort(scores), np.sort(lib_scores[inside]), rtol=1e-5)
    assert len(scores) <= len(_library_detections(counter, item, PROMPTS[0], 0.6, 0.8)[1])


def test_bf16_autocast_gives_float32_maps_with_whole_counts(counter, make_items):
    from countboard.models.precision import numerics

    items = make_items(2, seed=11)
    with numerics("cpu", "bf16"):
        maps = counter.density(items, PROMPTS[:2])
    assert [(m.shape, m.dtype) for m in maps] == [(it.size, np.float32) for it in items]
    counts = np.array([m.sum() for m in maps])
    np.testing.assert_array_equal(counts, np.round(counts))


def test_pairs_of_several_images_per_call_give_each_image_alone(counter, make_items):
    """The fusion encoder and decoder over the pairs of several images per call (same pixel size and prompt length)
    give every pair's counts and maps exactly as a call of its image's prompts alone (the per-image head), and its
    scores and boxes within float rounding (matrix products over more rows round differently, about 1e-7)."""
    # two images of each of two sizes (a square image's last level is 1 x 1: one prompt alone fails GroupNorm)
    items = make_items(4, seed=15, sizes=((40, 64), (64, 48)))
    feats = counter.encode_images(items)
    pairs = [(i, p) for i in range(len(items)) for p in PROMPTS]
    features, prompts = [feats[i] for i, _ in pairs], [p for _, p in pairs]
    calls = counter._calls(features, prompts)
    per_image = sum(len(counter._calls([f] * len(PROMPTS), PROMPTS)) for f in feats)
    assert len(calls) == per_image // 2 and max(len({pairs[k][0] for k in idx}) for idx in calls) == 2
    found = counter.detect(features, prompts)
    alone = [d for i in range(len(items)) for d in counter.detect([feats[i]] * len(PROMPTS), PROMPTS)]
    for (boxes, scores), (ref_boxes, ref_scores) in zip(found, alone, strict=True):
        assert len(scores) == len(ref_scores)
        np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-6)
        np.testing.assert_allclose(boxes, ref_boxes, rtol=0, atol=1e-4)
    assert sum(len(s) for _, s in found) > 0
    maps = counter.decode(features, prompts)
    ref_maps = [m for i in range(len(items)) for m in counter.decode([feats[i]] * len(PROMPTS), PROMPTS)]
    for m, r in zip(maps, ref_maps, strict=True):
        np.testing.assert_array_equal(m, r)
    np.testing.assert_array_equal(counter.decode_counts(features, prompts), [float(m.sum()) for m in ref_maps])


def test_calls_are_bounded_by_the_element_budget_but_hold_prompt_batch_size_pairs(counter, make_items, monkeypatch):
    from countboard.counting.models import grounding_dino

    feats = counter.encode_images(make_items(4, seed=16, sizes=((40, 64),)))
    features, prompts = [f for f in feats for _ in PROMPTS], PROMPTS * len(feats)
    assert [len(c) for c in counter._calls(features, prompts)] == [8, 4]  # two token lengths, every image
    monkeypatch.setattr(grounding_dino, "FUSION_ELEMENTS", 1)
    calls = counter._calls(features, prompts)
    assert [len(c) for c in calls] == [3, 3, 2, 3, 1]  # prompt_batch_size pairs per call at least
    assert sorted(i for c in calls for i in c) == list(range(len(prompts)))
