"""``model=detr``: a tiny random DETR (transformers' own ResNet backbone, no timm or torchvision) counting the
prompted class through its label map; prompts outside the map fail their units in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from countboard.counting.models.detr import SYNONYMS, DetrCounter, OutOfVocabulary, normalise, resolve_labels
from countboard.counting.tasks.classic import ClassicCounting
from countboard.counting.tasks.praco import PracoMosaic, PracoNegative
from countboard.errors import ConfigError
from countboard.results import RunContext
from tests.fixtures.tiny_models import build_tiny_detr

SHAPES = {"images_per_class": {"train": 0, "val": 0, "test": 2}, "multi_class_images": 0, "image_size": (40, 48),
          "size_range": (4.0, 6.0), "count_range": (1, 4), "n_classes": 3}


@pytest.fixture(scope="module")
def detr_dir(tmp_path_factory):
    return build_tiny_detr(tmp_path_factory.mktemp("tiny_detr"))


@pytest.fixture(scope="module")
def counter(detr_dir):
    return DetrCounter(model_id=str(detr_dir), score_threshold=0.1)


@pytest.fixture
def ctx(tmp_path):
    return RunContext(device="cpu", seed=0, batch_size=2, work_dir=tmp_path, progress=False)


VOCAB = {"person": [1], "car": [3], "cell phone": [77], "sports ball": [37], "bus": [6], "knife": [49],
         "wine glass": [46], "strawberry": [9], "skis": [35], "dining table": [67], "mouse": [74]}


@pytest.mark.parametrize(("prompt", "ids"), [
    ("person", (1,)), ("People", (1,)), ("the cars.", (3,)), ("a car", (3,)), ("  CARS ", (3,)),
    ("mobile phones", (77,)), ("cellphone", (77,)), ("balls", (37,)), ("buses", (6,)), ("knives", (49,)),
    ("wine glasses", (46,)), ("strawberries", (9,)), ("skis", (35,)), ("ski", (35,)), ("tables", (67,)),
    ("mice", (74,)), ("pedestrians", (1,)),
])
def test_prompts_resolve_through_the_table_and_plurals(prompt, ids):
    assert resolve_labels(prompt, VOCAB, SYNONYMS) == ids


@pytest.mark.parametrize("prompt", ["sea shells", "zebras", "grass", "carrot cake", "", "cards"])
def test_prompts_outside_the_vocabulary_are_refused(prompt):
    with pytest.raises(OutOfVocabulary, match="not a class of the detector's label map"):
        resolve_labels(prompt, VOCAB, SYNONYMS)


def test_normalise():
    assert normalise(" An  Apple. ") == "apple" and normalise("The") == "the"


def test_label_map_and_refusal_in_one_line(counter, detr_dir):
    assert counter.vocabulary == {"person": [1], "car": [2], "red circle": [3], "blue square": [4],
                                  "green triangle": [5], "cell phone": [6]}
    assert counter.label_ids("red circles") == (3,) and counter.label_ids("phones") == (6,)
    with pytest.raises(OutOfVocabulary) as info:
        counter.label_ids("sea shells")
    message = str(info.value)
    assert "\n" not in message and "'sea shells'" in message and str(detr_dir) in message
    assert "model.synonyms" in message and "task.classes" in message
    extended = DetrCounter(model_id=str(detr_dir), synonyms={"Sea shell": "red circle"})
    assert extended.label_ids("sea shells") == (3,)
    with pytest.raises(ConfigError, match="score_threshold"):
        DetrCounter(model_id=str(detr_dir), score_threshold=1.0)
    with pytest.raises(ConfigError, match="could not load the DETR image processor"):
        DetrCounter(model_id=str(detr_dir / "missing"))


def _library_counts(counter, item, prompts, threshold):
    """transformers' path: processor, forward, ``post_process_object_detection``; detections of each prompt's
    label counted in a loop."""
    inputs = counter.processor(images=[item.image], return_tensors="pt")
    with torch.no_grad():
        out = counter.model(**inputs)
    found = counter.processor.post_process_object_detection(out, threshold=threshold, target_sizes=[item.size])[0]
    labels = [counter.labels[int(i)] for i in found["labels"]]
    boxes = found["boxes"].numpy()[:, [1, 0, 3, 2]]          # (x0, y0, x1, y1) -> (y0, x0, y1, x1)
    return [sum(lab == p for lab in labels) for p in prompts], labels, boxes, found["scores"].numpy()


def test_counts_and_boxes_equal_the_library_post_processing(detr_dir, make_items):
    items = make_items(4)
    prompts = ["person", "car", "red circle", "blue square", "green triangle", "cell phone"]
    model = DetrCounter(model_id=str(detr_dir))
    features = model.encode_images(items)
    model.decode_counts(features, ["car"] * len(items))          # runs DETR once per image
    best = torch.cat([f.probs[:, :-1].max(-1).values for f in features])
    model.score_threshold = threshold = float(best.median())     # about half of the queries pass
    total = 0
    for item, feat in zip(items, features, strict=True):
        want, labels, boxes, scores = _library_counts(model, item, prompts, threshold)
        assert model.decode_counts([feat] * len(prompts), prompts).tolist() == want
        total += sum(want)
        for p in set(labels):
            det_boxes, det_scores = model.detect([feat], [p])[0]
            mine = [k for k, lab in enumerate(labels) if lab == p]
            order = np.argsort(-scores[mine], kind="stable")
            np.testing.assert_allclose(det_scores, scores[mine][order], rtol=1e-5)
            np.testing.assert_allclose(det_boxes, boxes[mine][order], rtol=1e-4, atol=1e-3)
    assert total > 0


def _forced(counter, plan):
    """Forces the class head: ``plan[q]`` is the label id query ``q`` predicts with probability ~1 (None: "no
    object"). Returns the hook handle."""
    n_labels = counter.model.config.num_labels

    def hook(module, args, output):
        logits = torch.full_like(output, -20.0)
        for q, label in enumerate(plan):
            logits[:, q, n_labels if label is None else label] = 20.0
        return logits

    return counter.model.class_labels_classifier.register_forward_hook(hook)


def test_forced_detections_counted_per_prompt_with_unit_masses_at_centres(detr_dir, make_items):
    counter = DetrCounter(model_id=str(detr_dir))            # the model card's 0.9
    plan = [2, 2, 2, 1, None, None, 3, None, None, None, None, None]
    handle = _forced(counter, plan)
    try:
        items = make_items(3)
        prompts = ["cars", "People", "red circles", "blue squares", "the cell phone."]
        counts = counter.count([it for it in items for _ in prompts], prompts * len(items))
        np.testing.assert_array_equal(counts.reshape(3, -1), [[3, 1, 1, 0, 0]] * 3)
        maps = counter.density(items, ["cars"] * 3)
        for item, dmap in zip(items, maps, strict=True):
            assert dmap.shape == item.size and dmap.dtype == np.float32 and float(dmap.sum()) == 3.0
            boxes, _ = counter.detect(counter.encode_images([item]), ["car"])[0]
            centres = {(int((b[0] + b[2]) / 2), int((b[1] + b[3]) / 2)) for b in boxes}
            centres = {(min(max(y, 0), item.size[0] - 1), min(max(x, 0), item.size[1] - 1)) for y, x in centres}
            assert set(zip(*np.nonzero(dmap), strict=True)) == centres
        with pytest.raises(OutOfVocabulary, match="'zebras'"):
            counter.count(items[:2], ["cars", "zebras"])
    finally:
        handle.remove()


def test_each_image_runs_once_for_all_its_prompts_and_not_for_refused_ones(detr_dir, make_items):
    counter = DetrCounter(model_id=str(detr_dir), image_batch_size=8)
    seen = []
    handle = counter.model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(
        kwargs["pixel_values"].shape[0]), with_kwargs=True)
    try:
        items = make_items(6)                                  # three sizes, two images each
        features = counter.encode_images(items)
        assert seen == []
        with pytest.raises(OutOfVocabulary):
            counter.decode_counts(features, ["zebras"] * 6)
        assert seen == []                                      # refused before the model ran
        counter.decode_counts([f for f in features for _ in range(3)], ["car", "person", "cell phone"] * 6)
        counter.decode_counts(features, ["car"] * 6)
        assert sorted(seen) == [2, 2, 2]                       # one forward per size, then cached
    finally:
        handle.remove()


def test_tasks_count_known_classes_and_fail_unknown_ones_in_one_line(detr_dir, tmp_path, ctx):
    from countboard.counting.datasets.synthetic_shapes import SyntheticShapes

    shapes = SyntheticShapes(tmp_path / "shapes", **{**SHAPES, "n_classes": 4})   # yellow stars: not in the map
    counter = DetrCounter(model_id=str(detr_dir), score_threshold=0.1)
    known = shapes.classes[:3]
    negative = PracoNegative(classes=known)
    records = negative.run_units(counter, shapes, negative.units(counter, shapes, ctx), ctx)
    assert records and not [r for r in records if "error" in r]
    for r in records:
        item = shapes.load(r["image_id"])
        assert r["counts"] == counter.count([item] * 3, known).tolist()
    refused = PracoNegative().run_units(counter, shapes, shapes.image_ids, ctx)
    assert all("error" in r and "'yellow stars'" in r["error"] and "\n" not in r["error"] for r in refused)
    classic = ClassicCounting().run_units(counter, shapes, shapes.image_ids, ctx)
    failed = {r["unit_id"] for r in classic if "error" in r}
    assert failed == {i for i in shapes.image_ids if shapes.class_of(i) == "yellow stars"}
    assert all(r["count"] >= 0 for r in classic if "error" not in r)
    mosaic = PracoMosaic(classes=known, tile_size=(20, 24), n_figures=0)
    records = mosaic.run_units(counter, shapes, mosaic.units(counter, shapes, ctx), ctx)
    assert records and not [r for r in records if "error" in r]


@pytest.mark.slow
def test_sweep_counts_with_detr(tmp_path, detr_dir):
    from tests.conftest import run_sweep, store_runs

    small = ["dataset=synthetic_shapes", "dataset.images_per_class={train:0,val:0,test:2}",
             "dataset.multi_class_images=0", "dataset.image_size=[40,48]", "dataset.size_range=[4,6]",
             "dataset.count_range=[1,4]"]
    run_sweep(["-m", "model=detr", f"model.model_id={detr_dir}", "model.score_threshold=0.1",
               "task=praco_negative,praco_mosaic,classic", *small, "dataset.n_classes=3",
               f"dataset.root={tmp_path / 'three'}"], tmp_path)
    # a fourth class outside the label map: classic counts the others and fails its images' units
    run_sweep(["model=detr", f"model.model_id={detr_dir}", "task=classic", *small, "dataset.n_classes=4",
               f"dataset.root={tmp_path / 'four'}"], tmp_path)
    run_sweep(["model=detr", f"model.model_id={detr_dir}", "model.score_threshold=0.1", "task=praco_multiclass",
               "dataset=synthetic_multiclass", f"dataset.root={tmp_path / 'mc'}", "dataset.n_images=3",
               "dataset.n_classes=3", "dataset.image_size=[40,48]", "dataset.count_range=[1,4]"], tmp_path)
    runs = store_runs(tmp_path / "mlruns")
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 5 and set(cells["status"]) == {"FINISHED"}
    assert cells[cells["tags.task"] == "praco_multiclass"]["metrics.n_failed_samples"].iloc[0] == 0
    four = cells[cells["metrics.n_failed_samples"] > 0]
    assert len(four) == 1 and four["metrics.n_failed_samples"].iloc[0] == 2 and four["metrics.n_samples"].iloc[0] == 6
    # every class outside the map: the negative test's units all fail and the cell says why in one line
    proc = run_sweep(["model=detr", f"model.model_id={detr_dir}", "task=praco_negative", *small,
                     "dataset.n_classes=5", f"dataset.root={tmp_path / 'five'}"], tmp_path, check=False)
    assert proc.returncode != 0
    assert "has no class 'yellow stars' in its label map" in proc.stderr


def test_docstring_examples():
    import doctest

    import countboard.counting.models.detr as module

    assert doctest.testmod(module).failed == 0
