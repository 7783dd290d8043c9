"""The classic task's 2026 scores: count errors of every image, detection AP of a counter that outputs boxes on
items with object boxes (equal to pycocotools' COCOeval run on the same boxes), and every scoring convention of a
model asked in words over all its answers, the unparsable ones included."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.models.class_blind import ClassBlindCounter
from countboard.counting.models.oracle import OracleCounter
from countboard.counting.tasks.classic import ClassicCounting
from countboard.results import RunContext, check_outputs

SMALL = dict(image_size=(64, 64), size_range=(5.0, 8.0), count_range=(1, 8),
             images_per_class={"train": 0, "val": 0, "test": 3}, multi_class_images=0, n_classes=3)


class BoxedShapes(SyntheticShapes):
    """Synthetic shapes whose items carry every drawn object's box as ``object_boxes`` (FSCD-147's layout)."""

    def load(self, image_id):
        item = super().load(image_id)
        item.object_boxes = {c: np.asarray(b, np.float64).reshape(-1, 4) for c, b in item.boxes.items()}
        return item


class JitterDetector(OracleCounter):
    """Detects the annotated boxes shifted by a seeded jitter, drops some and adds a spurious one per image."""

    def detect(self, features, prompts):
        out = []
        for item, (boxes, _) in zip(features, super().detect(features, prompts), strict=True):
            rng = np.random.default_rng(zlib.crc32(item.image_id.encode()))
            kept = boxes[rng.random(len(boxes)) < 0.8]
            kept = kept + rng.normal(0, 1.5, kept.shape)
            spurious = np.array([[40.0, 40.0, 50.0, 50.0]])
            found = np.concatenate([kept, spurious])
            out.append((found, rng.random(len(found))))
        return out


@pytest.fixture(scope="module")
def boxed(tmp_path_factory):
    return BoxedShapes(tmp_path_factory.mktemp("boxed") / "shapes", **SMALL)


@pytest.fixture
def ctx(tmp_path):
    return RunContext(device="cpu", seed=0, batch_size=2, work_dir=tmp_path, progress=False)


def _run(model, dataset, ctx):
    task = ClassicCounting()
    records = check_outputs(task.run_units(model, dataset, task.units(model, dataset, ctx), ctx), task.model_outputs)
    assert not any("error" in r for r in records)
    return records, task.summarize(pd.DataFrame(records), model, dataset, ctx).metrics


def coco_reference(records) -> tuple[float, float]:
    """AP and AP50 from pycocotools' COCO and COCOeval built here from the records (xywh boxes, one category)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    def xywh(flat):
        b = np.asarray(flat, float).reshape(-1, 4)
        return [[x0, y0, x1 - x0, y1 - y0] for y0, x0, y1, x1 in b]

    gt = COCO()
    boxes = [(i, b) for i, r in enumerate(records, 1) for b in xywh(r["gt_boxes"])]
    anns = [{"id": k, "image_id": i, "category_id": 7, "bbox": b, "area": b[2] * b[3], "iscrowd": 0}
            for k, (i, b) in enumerate(boxes, 1)]
    gt.dataset = {"images": [{"id": i} for i in range(1, len(records) + 1)], "annotations": anns,
                  "categories": [{"id": 7}]}
    gt.createIndex()
    dets = [{"image_id": i, "category_id": 7, "bbox": b, "score": s} for i, r in enumerate(records, 1)
            for b, s in zip(xywh(r["pred_boxes"]), r["pred_scores"], strict=True)]
    ev = COCOeval(gt, gt.loadRes(dets), "bbox")
    ev.params.maxDets = [900, 1000, 1100]
    ev.evaluate()
    ev.accumulate()
    p = ev.eval["precision"][:, :, 0, 0, 2]
    return 100 * p[p > -1].mean(), 100 * p[0][p[0] > -1].mean()


def test_a_detector_s_boxes_are_kept_and_scored_as_coco_eval_scores_them(boxed, ctx):
    records, metrics = _run(JitterDetector(), boxed, ctx)
    assert all(len(r["pred_boxes"]) == 4 * len(r["pred_scores"]) and r["count"] == len(r["pred_scores"])
               for r in records)
    assert all(len(r["gt_boxes"]) == 4 * r["gt"] for r in records)
    ap, ap50 = coco_reference(records)
    assert 0 < metrics["det_ap"] < metrics["det_ap50"] < 100
    assert metrics["det_ap"] == pytest.approx(ap, abs=1e-9) and metrics["det_ap50"] == pytest.approx(ap50, abs=1e-9)
    assert metrics["n_det_images"] == len(records)


def test_the_oracle_detects_every_box(boxed, ctx):
    _, metrics = _run(OracleCounter(), boxed, ctx)
    assert metrics["det_ap"] == pytest.approx(100.0) and metrics["det_ap50"] == pytest.approx(100.0)
    assert metrics["mae"] == 0.0 and metrics["smape"] == 0.0 and metrics["off_by_one_acc"] == 100.0


def test_no_ap_without_boxes_on_either_side(boxed, tmp_path, ctx):
    records, metrics = _run(ClassBlindCounter(), boxed, ctx)  # a counter without detect
    assert "det_ap" not in metrics and not any("pred_boxes" in r for r in records)
    plain = SyntheticShapes(tmp_path / "plain", **SMALL)  # items without object boxes
    records, metrics = _run(OracleCounter(), plain, ctx)
    assert "det_ap" not in metrics and not any("pred_boxes" in r for r in records)


def test_conventions_score_every_answer_and_the_count_metrics_the_parsed_ones(boxed, ctx):
    answers = ["3", "3.", "There are 3", "three", "12", "I cannot tell"]
    gt = [3, 3, 3, 3, 2, 3]
    parsed = [3.0, 3.0, 3.0, 3.0, 12.0, None]
    records = [{"unit_id": f"u{k}", "image_id": f"u{k}", "class_name": "x", "gt": g, "answer": a,
                **({"count": c} if c is not None else {"parse_error": "unparsable answer"})}
               for k, (a, g, c) in enumerate(zip(answers, gt, parsed, strict=True))]
    model = SimpleNamespace(answers="count")
    metrics = ClassicCounting().summarize(pd.DataFrame(records), model, boxed, ctx).metrics
    assert metrics["n_images"] == 5 and metrics["n_answers"] == metrics["n_images_all"] == 6
    assert metrics["n_unparsed_answers"] == 1
    assert metrics["mae"] == pytest.approx(10 / 5)  # the parsed answers only
    assert metrics["answer_exact_acc"] == pytest.approx(100 * 4 / 5)
    assert metrics["smape"] == pytest.approx((100 * 10 / 14 + 100) / 6)  # the unparsable one counts 100
    expected = {"conv_lmms_eval_countbench": 2, "conv_lmms_eval_countbenchqa": 1, "conv_lmms_eval_pixmo_count": 3,
                "conv_lmms_eval_pixmo_count_reasoning": 3,
                "conv_vlmevalkit_countbenchqa": 4, "conv_vlmevalkit_tallyqa": 4, "conv_countboard": 4}
    assert set(expected) == {k for k in metrics if k.startswith("conv_") and "__" not in k}
    for key, hits in expected.items():
        assert metrics[key] == pytest.approx(100 * hits / 6), key
        assert metrics[key + "__low"] <= metrics[key] <= metrics[key + "__high"]
    # a pointing or open-question model's answers are no number a harness reads: no convention is logged
    points = ClassicCounting().summarize(pd.DataFrame(records), SimpleNamespace(answers="points"), boxed, ctx)
    assert not any(k.startswith("conv_") for k in points.metrics)


def test_a_tiny_owlv2_counts_its_detections_and_is_scored_by_them(boxed, ctx, tiny_owlv2_dir):
    from countboard.counting.models.owlv2 import Owlv2Counter

    owl = Owlv2Counter(model_id=str(tiny_owlv2_dir), score_threshold=0.0)  # random weights: keep every box
    records, metrics = _run(owl, boxed, ctx)
    items = [boxed.load(r["image_id"]) for r in records]
    assert [r["count"] for r in records] == owl.count(items, [it.class_name for it in items]).tolist()
    assert sum(r["count"] for r in records) > 0
    ap, ap50 = coco_reference(records)
    assert metrics["det_ap"] == pytest.approx(ap, abs=1e-9) and metrics["det_ap50"] == pytest.approx(ap50, abs=1e-9)
