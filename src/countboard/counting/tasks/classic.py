"""Classic counting: each image prompted with its own class; MAE, RMSE, MAPE and exact-count accuracy against the
ground truth.

Exact-count accuracy (the metric of counting VQA benchmarks and of GeckoNum's, appendix D) is the share of images
whose rounded count is the ground truth; a dataset whose answers bin large counts (GeckoNum's "10+", coded 11)
says so with ``count_cap``. It is also given per ground-truth number (``tables/accuracy_by_number.parquet``), and,
for a dataset that describes its units (``unit_fields``: GeckoNum's generator and prompt type), per generator and
number and per prompt type (``tables/accuracy_by_prompt_type.parquet``), each with a bootstrap interval.
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

        def count(chunk: list) -> list[tuple[float, dict, str | None]]:
            counts = model.count(chunk, [it.class_name for it in chunk])
            # a model asked in words: its raw answer beside the count, or why the answer states none
            return [(float(c), answer_fields(counts, k, k + 1), unparsed(counts, k, k + 1))
                    for k, c in enumerate(counts)]

        # a failed batch is counted again image by image, so that an image fails alone (a class a closed-vocabulary
        # detector does not know fails its own images, not their batch mates)
        for chunk, counted in ctx.isolated(loaded, count):
            for item, out in zip(chunk, counted, strict=True):
                if isinstance(out, Exception):
                    records[item.image_id] = error_record(item.image_id, "counting failed", out)
                    continue
                value, answer, bad = out
                if bad:  # a model asked in words that stated no count: failed, with its raw answer
                    records[item.image_id] = {"unit_id": item.image_id, "error": bad}
                    continue
                records[item.image_id] = {"unit_id": item.image_id, "image_id": item.image_id,
                                          "class_name": item.class_name, "gt": int(dataset.count_of(item.image_id)),
                                          "count": value, **({"answer": answer["answers"][0]} if answer else {}),
                                          **(fields(item.image_id) if fields else {})}
        return [records[u] for u in unit_ids]

    def summarize(self, records: pd.DataFrame, model: Any, dataset: ImageDataset, ctx: RunContext) -> TaskResult:
        pred, gt = records["count"].to_numpy(float), records["gt"].to_numpy(float)
        metrics = classic_metrics(pred, gt)
        if metrics["n_gt_zero"]:
            log.warning("%d images with ground truth 0 are left out of MAPE", metrics["n_gt_zero"])
        cap = getattr(dataset, "count_cap", None)
        exact = exact_count_units(pred, gt, cap)
        metrics["exact_accuracy"] = exact["exact_accuracy"].value() if len(gt) else float("nan")
        metrics.update(bootstrap.interval_metrics({**classic_units(pred, gt), **exact}))
        metrics["n_images"] = len(gt)
        if "answer" in records:  # a model asked in words: its parsed counts and lmms-eval's strict convention
            from countboard.models.answers import strict_match

            metrics["answer_exact_acc"] = float(100 * (pred == gt).mean())
            metrics["lmms_countbench_acc"] = float(100 * np.mean([strict_match(a, g) for a, g in
                                                                  zip(records["answer"], gt, strict=True)]))
        return TaskResult(metrics=metrics, tables=accuracy_tables(records, cap),
                          tags={tg.BOOTSTRAP: bootstrap.describe()})


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
