"""PrACo++ multi-class test: each image (several classes) prompted with every class of the split.

One unit per image: the image is encoded once and decoded with every class name, giving one row of the
images x classes count matrix; the metrics are those of ``countboard.metrics.praco_multiclass``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from countboard.counting.tasks.praco import finite_metrics, prompt_every_class
from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.metrics import bootstrap
from countboard.metrics.praco_multiclass import multiclass_metrics, multiclass_units
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking import tags as tg

log = logging.getLogger(__name__)


class PracoMulticlass(Task):
    """Every multi-class image prompted with every class of its split (MNP, NMN, MAE, RMSE, PCCN).

    The dataset must provide ``counts_of(image_id) -> {class: count}`` (``praco_multiclass`` and
    ``synthetic_multiclass`` do).
    """

    name = "praco_multiclass"
    family = "counters"

    def units(self, model: Any, dataset: Any, ctx: RunContext) -> list[str]:
        if not hasattr(dataset, "counts_of"):
            raise ConfigError(f"task=praco_multiclass needs a multi-class dataset (praco_multiclass, "
                              f"synthetic_multiclass); {type(dataset).__name__} has no per-class counts")
        return dataset.image_ids

    def run_units(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        classes = dataset.classes

        def record(item: ImageItem, counts: list[float]) -> dict:
            gt = dataset.counts_of(item.image_id)
            return {"unit_id": item.image_id, "image_id": item.image_id, "counts": counts,
                    "gt_counts": [int(gt[c]) for c in classes]}

        return prompt_every_class(model, dataset, unit_ids, classes, ctx, record)

    def summarize(self, records: pd.DataFrame, model: Any, dataset: Any, ctx: RunContext) -> TaskResult:
        classes = dataset.classes
        pred = np.stack([np.asarray(v, np.float64) for v in records["counts"]])
        gt = np.stack([np.asarray(v, np.float64) for v in records["gt_counts"]])
        if pred.shape[1] != len(classes):
            raise ConfigError(f"records hold {pred.shape[1]} counts per image but the split has {len(classes)} "
                              "classes; the dataset changed since the checkpoints were written: rerun with force=true")
        metrics = multiclass_metrics(pred, gt)
        metrics.update(bootstrap.interval_metrics(multiclass_units(pred, gt)))
        wide = pd.DataFrame(pred, columns=classes)
        wide.insert(0, "image_id", records["image_id"].to_numpy())
        truth = pd.DataFrame(gt.astype(int), columns=classes)
        truth.insert(0, "image_id", records["image_id"].to_numpy())
        long = wide.melt(id_vars="image_id", var_name="prompt", value_name="count")
        long["gt"] = truth.melt(id_vars="image_id", var_name="prompt", value_name="gt")["gt"].to_numpy()
        long["positive"] = long["gt"] > 0
        return TaskResult(metrics=finite_metrics(metrics),
                          tables={"multiclass_counts": wide, "multiclass_gt": truth, "multiclass_matrix": long},
                          tags={tg.PRACO_N_CLASSES: str(len(classes)), tg.BOOTSTRAP: bootstrap.describe()})
