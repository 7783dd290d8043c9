"""OmDet-Turbo on a tiny random model: the image encoded once, the text cached, counts equal to the unmodified
model's forward per (image, prompt) with transformers' score, the counted boxes and NMS written out in loops."""

import importlib.util

import numpy as np
import pytest
import torch

from countboard.counting.models.omdet_turbo import OmDetTurboCounter
from countboard.errors import ConfigError
from countboard.models.preprocess import grounding_dino_pixel_values
from tests.fixtures.tiny_models import tiny_omdet_turbo_dir  # noqa: F401

PROMPTS = ["red circle", "blue square", "apples"]
THRESHOLD = 0.67  # a random model's query scores sit around 0.62-0.72


@pytest.fixture(scope="module")
def counter(tiny_omdet_turbo_dir):  # noqa: F811
    return OmDetTurboCounter(model_id=str(tiny_omdet_turbo_dir), score_threshold=THRESHOLD, nms_iou=0.3,
                             prompt_batch_size=2)


def _iou(a, b):
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ih * iw
    return ih * iw / union if union > 0 else 0.0


def _library_outputs(counter, item, prompt):
    """The unmodified model's full forward on the inputs ``OmDetTurboProcessor`` makes for one class (pixels as the
    adapter makes them: bit for bit the PIL backend's, ``tests/models/test_preprocess.py``)."""
    pixels = grounding_dino_pixel_values([item.image], counter.image_processor, "cpu")[0]
    classes = counter.tokenizer([prompt], padding="max_length", truncation=True, max_length=77, return_tensors="pt")
    task = counter.tokenizer([f"Detect {prompt}."], padding="max_length", truncation=True, max_length=77,
                             return_tensors="pt")
    with torch.no_grad():
        return counter.model(pixel_values=pixels, classes_input_ids=classes["input_ids"],
                             classes_attention_mask=classes["attention_mask"], tasks_input_ids=task["input_ids"],
                             tasks_attention_mask=task["attention_mask"], classes_structure=torch.tensor([1]))


def _direct_count(counter, item, prompt, threshold, nms_iou):
    out = _library_outputs(counter, item, prompt)
    scores = torch.sigmoid(out.decoder_class_logits[0, :, 0]).numpy()  # compute_score of the post-processing
    h, w = item.size
    cands = []
    for s, (cx, cy, bw, bh) in zip(scores, out.decoder_coord_logits[0].numpy(), strict=True):
        box = ((cy - bh / 2) * h, (cx - bw / 2) * w, (cy + bh / 2) * h, (cx + bw / 2) * w)
        if s > threshold and 0 <= cy * h < h and 0 <= cx * w < w:
            cands.append((s, box))
    kept = []
    for _, b in sorted(cands, key=lambda c: -c[0]):
        if all(_iou(b, k) <= nms_iou for k in kept):
            kept.append(b)
    return len(kept)


def test_counts_match_unmodified_model_per_prompt(counter, make_items):
    items = make_items(2, seed=31)
    feats = counter.encode_images(items)
    pairs = [(i, p) for i in range(len(items)) for p in PROMPTS]
    maps = counter.decode([feats[i] for i, _ in pairs], [p for _, p in pairs])
    counts = counter.decode_counts([feats[i] for i, _ in pairs], [p for _, p in pairs]).tolist()
    expected = [_direct_count(counter, items[i], p, THRESHOLD, 0.3) for i, p in pairs]
    assert counts == expected == [float(m.sum()) for m in maps]
    assert 0 < sum(counts) < 20 * len(pairs)  # the threshold cuts between the scores
    assert all(m.shape == items[i].size and m.dtype == np.float32 for (i, _), m in zip(pairs, maps, strict=True))


def test_pixels_equal_the_image_processors_pil_backend(counter, make_items):
    if type(counter.image_processor).__name__ != "DetrImageProcessorPil":
        pytest.skip("the torchvision backend is loaded; its resize differs from PIL's by rounding")
    for item in make_items(3, seed=37):
        ref = counter.image_processor(images=item.image, return_tensors="pt")["pixel_values"]
        torch.testing.assert_close(grounding_dino_pixel_values([item.image], counter.image_processor, "cpu")[0], ref,
                                   rtol=0, atol=0)


def test_scores_and_boxes_equal_the_full_forward(counter, make_items):
    item = make_items(1, seed=32)[0]
    scores, boxes = counter.scores_and_boxes(counter.encode_images([item])[0], PROMPTS)
    for q, prompt in enumerate(PROMPTS):
        out = _library_outputs(counter, item, prompt)
        torch.testing.assert_close(scores[q], torch.sigmoid(out.decoder_class_logits[0, :, 0]), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(boxes[q], out.decoder_coord_logits[0], rtol=1e-5, atol=1e-6)


def test_image_encoded_once_and_each_prompt_embedded_once(counter, make_items):
    images, texts = [], []
    h1 = counter.model.vision_backbone.register_forward_hook(lambda m, args, out: images.append(len(args[0])))
    h2 = counter.model.language_backbone.register_forward_hook(lambda m, args, out: texts.append(len(args[0])))
    counter._text.clear()
    try:
        feats = counter.encode_images(make_items(4, seed=33))
        counter.decode_counts([f for f in feats for _ in PROMPTS], PROMPTS * len(feats))
        counter.decode_counts([f for f in feats for _ in PROMPTS], PROMPTS * len(feats))
    finally:
        h1.remove()
        h2.remove()
    assert images == [4]  # image_batch_size=auto: the four images in one call
    assert texts == [2, 2, 1, 1]  # class and task of the first chunk's 2 prompts, then of the third; then cached


def test_bf16_autocast_gives_float32_maps_with_whole_counts(counter, make_items):
    from countboard.models.precision import numerics

    items = make_items(2, seed=34)
    with numerics("cpu", "bf16"):
        maps = counter.density(items, PROMPTS[:2])
    assert [(m.shape, m.dtype) for m in maps] == [(it.size, np.float32) for it in items]
    counts = np.array([m.sum() for m in maps])
    np.testing.assert_array_equal(counts, np.round(counts))


def test_a_checkpoint_of_another_detector_is_refused_in_one_line(tiny_owlv2_dir):
    with pytest.raises(ConfigError, match="'owlv2' checkpoint, not 'omdet-turbo'"):
        OmDetTurboCounter(model_id=str(tiny_owlv2_dir))


@pytest.mark.torchvision
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="OmDetTurboProcessor needs torchvision (not installed: a CUDA build, kept out of the base "
                           "install); runs where it is importable")
def test_counts_equal_the_processor_post_processing_without_nms(counter, make_items):
    from transformers import OmDetTurboProcessor

    processor = OmDetTurboProcessor(image_processor=counter.image_processor, tokenizer=counter.tokenizer)
    counter.nms_iou = 1.0
    try:
        for item in make_items(2, seed=35):
            for prompt in PROMPTS:
                inputs = processor(images=item.image, text=[prompt], return_tensors="pt")
                # the adapter's pixels (the PIL backend's resize; torchvision's differs by rounding): only the
                # post-processing is compared
                inputs["pixel_values"] = grounding_dino_pixel_values([item.image], counter.image_processor, "cpu")[0]
                with torch.no_grad():
                    out = counter.model(**inputs)
                res = processor.post_process_grounded_object_detection(
                    out, text_labels=[prompt], threshold=THRESHOLD, nms_threshold=1.0, target_sizes=[item.size])[0]
                boxes = res["boxes"].numpy()
                cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
                inside = (cy >= 0) & (cy < item.size[0]) & (cx >= 0) & (cx < item.size[1])
                assert counter.count([item], [prompt])[0] == inside.sum()
    finally:
        counter.nms_iou = 0.3


def test_reduce_maps_reads_the_density_maps_sums(counter, make_items):
    """The mosaic test's path (maps made and reduced on the device, one transfer) agrees with ``density``."""
    items = make_items(2, seed=36)
    pairs_items, pairs_prompts = [it for it in items for _ in PROMPTS], PROMPTS * 2
    reduced = counter.reduce_maps(pairs_items, pairs_prompts, lambda i, m: [m.sum(), m[: m.shape[0] // 2].sum()])
    maps = counter.density(pairs_items, pairs_prompts)
    assert [[float(a), float(b)] for a, b in reduced] == [[float(m.sum()), float(m[: m.shape[0] // 2].sum())]
                                                          for m in maps]


def test_pairs_of_several_images_per_call_give_each_image_alone(counter, make_items):
    """The decoder over the pairs of several images per call gives every pair's counts and maps exactly as a call
    of its image's prompts alone (the per-image head), and its scores and boxes within float rounding (matrix
    products over more rows round differently)."""
    items = make_items(4, seed=35)
    feats = counter.encode_images(items)
    pairs = [(i, p) for i in range(len(items)) for p in PROMPTS]
    features, prompts = [feats[i] for i, _ in pairs], [p for _, p in pairs]
    calls = counter._calls(prompts)
    per_image = len(items) * len(counter._calls(PROMPTS))
    assert len(calls) * len(items) == per_image and all(len({pairs[k][0] for k in idx}) == 4 for idx in calls)
    found = counter.detect(features, prompts)
    alone = [d for f in feats for d in counter.detect([f] * len(PROMPTS), PROMPTS)]
    for (boxes, scores), (ref_boxes, ref_scores) in zip(found, alone, strict=True):
        assert len(scores) == len(ref_scores)
        np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-6)
        np.testing.assert_allclose(boxes, ref_boxes, rtol=0, atol=1e-4)
    maps = counter.decode(features, prompts)
    ref_maps = [m for f in feats for m in counter.decode([f] * len(PROMPTS), PROMPTS)]
    for m, r in zip(maps, ref_maps, strict=True):
        np.testing.assert_array_equal(m, r)
    counts = counter.decode_counts(features, prompts)
    np.testing.assert_array_equal(counts, [float(m.sum()) for m in ref_maps])
    assert 0 < counts.sum() < 20 * len(pairs)
