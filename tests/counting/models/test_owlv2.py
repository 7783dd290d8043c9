import numpy as np
import pytest
import torch

from countboard.counting.models.owlv2 import Owlv2Counter
from countboard.errors import ConfigError
from countboard.models.device_batch import EncodedImages

PROMPTS = ["red circle", "blue square", "apples"]


def _direct_counts(counter: Owlv2Counter, item, prompts, threshold, nms_iou):
    """Full OWLv2 forward on (image, all prompts), then threshold, drop padding, greedy NMS — written out in loops."""
    proc, model = counter.processor, counter.model
    inputs = proc(text=[prompts], images=[item.image], return_tensors="pt", padding="max_length",
                  max_length=model.config.text_config.max_position_embeddings, truncation=True)
    with torch.no_grad():
        out = model(**inputs)
    scores = torch.sigmoid(out.logits[0]).numpy()
    side = max(item.size)
    counts = []
    for q in range(len(prompts)):
        cands = []
        for p in range(scores.shape[0]):
            cx, cy, w, h = (out.pred_boxes[0, p].numpy() * side).tolist()
            if scores[p, q] > threshold and 0 <= cy < item.size[0] and 0 <= cx < item.size[1]:
                cands.append((scores[p, q], (cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2)))
        cands.sort(key=lambda c: -c[0])
        kept = []
        for _, b in cands:
            if all(_iou(b, k) <= nms_iou for k in kept):
                kept.append(b)
        counts.append(len(kept))
    return counts


def _iou(a, b):
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ih * iw
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@pytest.fixture(scope="module")
def counter(tiny_owlv2_dir):
    return Owlv2Counter(model_id=str(tiny_owlv2_dir), score_threshold=0.5, nms_iou=0.5)


def test_density_maps_have_image_size_and_integer_mass(counter, make_items):
    items = make_items(3)
    maps = counter.density(items, PROMPTS)
    assert [m.shape for m in maps] == [it.size for it in items]
    assert all(m.dtype == np.float32 for m in maps)
    counts = np.array([m.sum() for m in maps])
    assert counts.sum() > 0
    np.testing.assert_array_equal(counts, np.round(counts))


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.52])
def test_counts_match_direct_full_forward(counter, threshold, make_items):
    counter.score_threshold = threshold
    try:
        for item in make_items(3, seed=1):
            expected = _direct_counts(counter, item, PROMPTS, threshold, counter.nms_iou)
            assert counter.count([item] * len(PROMPTS), PROMPTS).tolist() == expected
    finally:
        counter.score_threshold = 0.5


def test_cached_features_with_batched_prompts_equal_per_pair_calls(counter, make_items):
    items = make_items(2, seed=2)
    feats = counter.encode_images(items)
    pairs = [(i, p) for i in range(len(items)) for p in PROMPTS]
    batched = counter.decode([feats[i] for i, _ in pairs], [p for _, p in pairs])
    for (i, p), m in zip(pairs, batched, strict=True):
        np.testing.assert_array_equal(m, counter.density([items[i]], [p])[0])


def test_lower_threshold_never_counts_fewer(counter, make_items):
    items = make_items(3, seed=3)
    feats = counter.encode_images(items)
    counts = []
    for threshold in (0.6, 0.5, 0.4):
        counter.score_threshold = threshold
        counts.append([m.sum() for m in counter.decode(feats, PROMPTS)])
    counter.score_threshold = 0.5
    counter.nms_iou = 1.0
    no_nms = [m.sum() for m in counter.decode(feats, PROMPTS)]
    counter.nms_iou = 0.5
    assert np.all(np.diff(np.array(counts), axis=0) >= 0)
    assert np.all(np.array(no_nms) >= np.array(counts[1]))


def test_missing_weights_raise_config_error(tmp_path):
    with pytest.raises(ConfigError, match="model.model_id"):
        Owlv2Counter(model_id=str(tmp_path / "nowhere"))


def _library_detections(counter, item, prompt, threshold):
    """transformers' own path: processor, full model forward, ``post_process_object_detection``."""
    inputs = counter.processor(text=[[prompt]], images=[item.image], return_tensors="pt")
    with torch.no_grad():
        out = counter.model(**inputs)
    res = counter.processor.image_processor.post_process_object_detection(out, threshold=threshold,
                                                                          target_sizes=[item.size])[0]
    return res["boxes"].numpy(), res["scores"].numpy()


def _centre_inside(xyxy, size):
    cx, cy = (xyxy[:, 0] + xyxy[:, 2]) / 2, (xyxy[:, 1] + xyxy[:, 3]) / 2
    return (cy >= 0) & (cy < size[0]) & (cx >= 0) & (cx < size[1])


@pytest.mark.parametrize("threshold", [0.45, 0.5])
def test_detections_equal_transformers_post_processing_and_pipeline(counter, threshold, make_items):
    """Same boxes and scores as transformers; the adapter only drops boxes centred in the padding (and runs NMS,
    switched off here): both intended, documented in docs/counters.md."""
    from PIL import Image
    from transformers import pipeline

    counter.score_threshold, counter.nms_iou = threshold, 1.0
    detector = pipeline("zero-shot-object-detection", model=counter.model, tokenizer=counter.processor.tokenizer,
                        image_processor=counter.processor.image_processor, device="cpu")
    n_lib = n_padding = 0
    try:
        for item in make_items(3, seed=11):
            feats = counter.encode_images([item])
            found = counter.detect(feats * len(PROMPTS), PROMPTS)
            piped = detector(Image.fromarray(item.image), candidate_labels=PROMPTS, threshold=threshold)
            for prompt, (boxes, scores) in zip(PROMPTS, found, strict=True):
                lib_boxes, lib_scores = _library_detections(counter, item, prompt, threshold)
                inside = _centre_inside(lib_boxes, item.size)
                n_lib, n_padding = n_lib + len(lib_scores), n_padding + int((~inside).sum())
                order = np.argsort(-lib_scores[inside], kind="stable")
                np.testing.assert_allclose(scores, lib_scores[inside][order], rtol=1e-5)
                np.testing.assert_allclose(boxes[:, [1, 0, 3, 2]], lib_boxes[inside][order], atol=1e-3)
                from_pipe = [d for d in piped if d["label"] == prompt]
                assert sorted(d["score"] for d in from_pipe) == pytest.approx(sorted(lib_scores.tolist()), rel=1e-5)
                pipe_boxes = sorted((d["box"]["xmin"], d["box"]["ymin"], d["box"]["xmax"], d["box"]["ymax"])
                                    for d in from_pipe)
                assert pipe_boxes == sorted(tuple(int(v) for v in b) for b in lib_boxes.tolist())
                assert counter.count([item], [prompt])[0] == inside.sum()
    finally:
        counter.score_threshold, counter.nms_iou = 0.5, 0.5
    assert n_lib > n_padding > 0  # not vacuous: boxes on both sides of the image edge


def test_bf16_autocast_gives_float32_maps_with_whole_counts(counter, make_items):
    from countboard.models.precision import numerics

    items = make_items(3, seed=11)
    with numerics("cpu", "bf16"):
        maps = counter.density(items, PROMPTS)
    assert [(m.shape, m.dtype) for m in maps] == [(it.size, np.float32) for it in items]
    counts = np.array([m.sum() for m in maps])
    np.testing.assert_array_equal(counts, np.round(counts))


def test_the_class_head_takes_cached_features_of_any_precision(counter, make_items):
    """Image features cached in bf16 (encoded under autocast) meet text embeddings cached in float32 (or the other
    way round) with no autocast around: the class head runs in float32 and counts as with float32 features."""
    items = make_items(2, seed=3)
    feats = counter.encode_images(items)
    pairs = [f for f in feats for _ in PROMPTS], PROMPTS * len(items)
    want = np.asarray(counter.decode_counts(*pairs))
    half = EncodedImages({"patch_feats": torch.cat([f["patch_feats"] for f in feats]).to(torch.bfloat16),
                          "boxes": torch.cat([f["boxes"] for f in feats])}, [f.size for f in feats]).refs()
    got = np.asarray(counter.decode_counts([f for f in half for _ in PROMPTS], PROMPTS * len(items)))
    assert np.abs(got - want).max() <= 1  # bf16 features round; no dtype error
