"""Classic counting: each image prompted with its own class; MAE, RMSE, MAPE and exact-count accuracy against the
ground truth.

Exact-count accuracy (the metric of counting VQA benchmarks and of GeckoNum's, appendix D) is the share of images
whose rounded count is the ground truth; a dataset whose answers bin large counts (GeckoNum's "10+", coded 11)
says so with ``count_cap``. It is also given per ground-truth number (``tables/accuracy_by_number.parquet``), and,
for a dataset that describes its units (``unit_fields``: GeckoNum's generator and prompt type), per generator and
number and per prompt type (``tables/accuracy_by_prompt_type.parquet``), each with a bootstrap interval.

Beside them, each with its interval: off-by-one accuracy, normalised MAE, CAPTURe's sMAPE and CountQA's relaxed
accuracies (``metrics.count_errors``). A counter that outputs boxes (``detect``) on items with ground-truth boxes
(``ImageItem.object_boxes``) counts its detections, keeps them in the record (``pred_boxes``, ``pred_scores``,
``gt_boxes``: flat lists of ``y0, x0, y1, x1``) and is scored by detection AP/AP50 (``metrics.detection``).

A model asked in words keeps its raw ``answer`` in every record: an answer that states no count is kept with its
``parse_error`` (and no ``count``), out of the count metrics (``n_unparsed_answers`` says how many) but in the
accuracy under every published scoring convention (``models.conventions``), where each harness scores it by its
own rule; sMAPE counts it 100, as CAPTURe does a missing prediction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from countboard.counting.tasks.praco import error_record, load_images, select_classes
from countboard.items import ImageDataset
from countboard.metrics import bootstrap
from countboard.metrics.count_errors import count_error_units
from countboard.metrics.counting import (
    accuracy_by,
    classic_metrics,
    classic_units,
    exact_count_hits,
    exact_count_units,
)
from countboard.models.base import answer_fields, unparsed
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking import tags as tg

log = logging.getLogger(__name__)


class ClassicCounting(Task):
    """Count each image's own class (the class-specific protocol PrACo complements).

    Args:
        classes: Evaluate only the images of these classes (default: the whole split).
    """

    name = "classic"
    family = "counters"
    model_kinds = ("counter",)
    dataset_kinds = ("counting",)
    model_outputs = ("count",)

    def __init__(self, classes: Sequence[str] | None = None):
        self.classes = list(classes) if classes is not None else None

    def units(self, model: Any, dataset: ImageDataset, ctx: RunContext) -> list[str]:
        if self.classes is None:
            return dataset.image_ids
        return select_classes(dataset, self.classes)[1]

    def input_keys(self, model: Any, dataset: ImageDataset, unit_ids: Sequence[str], ctx: RunContext) -> list[str]:
        return list(unit_ids)

    def run_units(self, model: Any, dataset: ImageDataset, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        fields = getattr(dataset, "unit_fields", None)
        records: dict[str, dict] = {}
        loaded = load_images(dataset, unit_ids, ctx, records)

        detects = callable(getattr(model, "detect", None))

        def count(chunk: list) -> list[tuple[float, dict, str | None, dict]]:
            prompts = [it.class_name for it in chunk]
            if detects and all(it.class_name in it.object_boxes for it in chunk):
                found = model.detect(model.encode_images(chunk), prompts)
                return [(float(len(b)), {}, None, box_fields(b, s, it.object_boxes[it.class_name]))
                        for (b, s), it in zip(found, chunk, strict=True)]
            counts = model.count(chunk, prompts)
            # a model asked in words: its raw answer beside the count, or why the answer states none
            return [(float(c), answer_fields(counts, k, k + 1), unparsed(counts, k, k + 1), {})
                    for k, c in enumerate(counts)]

        # a failed batch is counted again image by image, so that an image fails alone (a class a closed-vocabulary
        # detector does not know fails its own images, not their batch mates)
        for chunk, counted in ctx.isolated(loaded, count):
            for item, out in zip(chunk, counted, strict=True):
                if isinstance(out, Exception):
                    records[item.image_id] = error_record(item.image_id, "counting failed", out)
                    continue
                value, answer, bad, boxes = out
                record = {"unit_id": item.image_id, "image_id": item.image_id, "class_name": item.class_name,
                          "gt": int(dataset.count_of(item.image_id)),
                          **({"answer": answer["answers"][0]} if answer else {}),
                          # an answer that states no count: kept with the reason, out of the count metrics
                          **({"parse_error": bad} if bad else {"count": value}), **boxes,
                          **(fields(item.image_id) if fields else {})}
                records[item.image_id] = record
        return [records[u] for u in unit_ids]

    def summarize(self, records: pd.DataFrame, model: Any, dataset: ImageDataset, ctx: RunContext) -> TaskResult:
        answered = records
        records = parsed_records(records)
        pred, gt = records["count"].to_numpy(float), records["gt"].to_numpy(float)
        metrics = classic_metrics(pred, gt)
        if metrics["n_gt_zero"]:
            log.warning("%d images with ground truth 0 are left out of MAPE", metrics["n_gt_zero"])
        cap = getattr(dataset, "count_cap", None)
        exact = exact_count_units(pred, gt, cap)
        metrics["exact_accuracy"] = exact["exact_accuracy"].value() if len(gt) else float("nan")
        # the errors of every answered image: a missing count is wrong, and CAPTURe's 100 in sMAPE
        all_pred = answered["count"].to_numpy(float) if "count" in answered else np.full(len(answered), np.nan)
        errors = count_error_units(all_pred, answered["gt"].to_numpy(float))
        metrics.update({k: u.value() if len(answered) else float("nan") for k, u in errors.items()})
        metrics["n_images"], metrics["n_images_all"] = len(gt), len(answered)
        if "answer" in answered:  # a model asked in words: its parsed counts and every published convention
            metrics.update(answer_metrics(answered, records, model, errors))
        if {"pred_boxes", "gt_boxes"} <= set(records.columns):
            detection, detection_units = detection_metrics(records)
            metrics.update(detection)
            metrics.update(bootstrap.interval_metrics(detection_units))  # over the images with boxes
        # intervals over the images scored by their counts, and over every answered image
        metrics.update(bootstrap.interval_metrics({**classic_units(pred, gt), **exact}))
        metrics.update(bootstrap.interval_metrics(errors))
        return TaskResult(metrics=metrics, tables=accuracy_tables(records, cap),
                          tags={tg.BOOTSTRAP: bootstrap.describe()})


def parsed_records(records: pd.DataFrame) -> pd.DataFrame:
    """The records with a count (those of a model asked in words whose answer stated one, and every other)."""
    if "count" not in records:
        return records.iloc[:0].assign(count=pd.Series(dtype=float))
    return records[records["count"].notna()].reset_index(drop=True)


def answer_metrics(answered: pd.DataFrame, parsed: pd.DataFrame, model: Any, units: dict) -> dict[str, float]:
    """A model asked in words: ``answer_exact_acc`` and ``lmms_countbench_acc`` over the parsed answers, and, for
    one that answers a number, the accuracy under every scoring convention over all answers (``conv_*``, with
    their units added to ``units``)."""
    from countboard.models.answers import strict_match
    from countboard.models.conventions import convention_hits

    gt = parsed["gt"].to_numpy(float)
    out = {"n_answers": len(answered), "n_unparsed_answers": int(len(answered) - len(parsed))}
    if len(parsed):
        out["answer_exact_acc"] = float(100 * (parsed["count"].to_numpy(float) == gt).mean())
        out["lmms_countbench_acc"] = float(100 * np.mean([strict_match(a, g) for a, g in
                                                          zip(parsed["answer"], gt, strict=True)]))
    if getattr(model, "answers", "count") != "count":  # point tags or an open question: no harness reads them
        return out
    counts = answered["count"].to_numpy(float) if "count" in answered else np.full(len(answered), np.nan)
    for key, hits in convention_hits([str(a) for a in answered["answer"]], answered["gt"].astype(int).tolist(),
                                     counts).items():
        units[key] = bootstrap.UnitStatistic((hits,), bootstrap.percent)
        out[key] = units[key].value()
    return out


def box_fields(boxes, scores, truth) -> dict[str, list[float]]:
    """A detection record's boxes: ``pred_boxes`` and ``gt_boxes`` as flat ``y0, x0, y1, x1`` lists, and
    ``pred_scores``."""
    return {"pred_boxes": np.asarray(boxes, np.float64).reshape(-1).tolist(),
            "pred_scores": np.asarray(scores, np.float64).reshape(-1).tolist(),
            "gt_boxes": np.asarray(truth, np.float64).reshape(-1).tolist()}


def detection_metrics(records: pd.DataFrame) -> tuple[dict[str, float], dict]:
    """``det_ap`` and ``det_ap50`` over the records that hold boxes (``box_fields``), and ``n_det_images``; and
    the two as unit statistics over those images (``metrics.detection.detection_ap_units``), for their intervals."""
    from countboard.metrics.detection import coco_eval, detection_ap_units, mean_precision

    rows = records.dropna(subset=["pred_boxes", "gt_boxes"])
    if rows.empty:
        return {}, {}

    def boxes(column: str) -> list[np.ndarray]:
        return [np.asarray(v, np.float64).reshape(-1, 4) for v in rows[column]]

    scores = [np.asarray(v, np.float64).reshape(-1) for v in rows["pred_scores"]]
    evaluation = coco_eval(boxes("pred_boxes"), scores, boxes("gt_boxes"))
    metrics = {"det_ap": mean_precision(evaluation, None), "det_ap50": mean_precision(evaluation, 0.5),
               "n_det_images": len(rows)}
    return metrics, detection_ap_units(evaluation)


def accuracy_tables(records: pd.DataFrame, cap: float | None) -> dict[str, pd.DataFrame]:
    """Exact-count accuracy by ground-truth number (per generator when the units name one) and by prompt type."""
    if records.empty:
        return {}
    hits = exact_count_hits(records["count"].to_numpy(float), records["gt"].to_numpy(float), cap)
    by_number = {"number": records["gt"].to_numpy(float)}
    if "generator" in records:
        by_number = {"generator": records["generator"].astype(str).to_numpy(), **by_number}
    tables = {"accuracy_by_number": accuracy_by(hits, by_number)}
    if "prompt_type" in records:
        tables["accuracy_by_prompt_type"] = accuracy_by(hits, {"prompt_type": records["prompt_type"].astype(str)
                                                               .to_numpy()})
    return tables
