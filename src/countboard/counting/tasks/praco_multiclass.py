"""PrACo++ multi-class test: each image (several classes) prompted with every class of the split.

One unit per image: the image is encoded once and decoded with every class name, giving one row of the
images x classes count matrix; the metrics are those of ``countboard.metrics.praco_multiclass``. Each record also
holds, per positive class, the localized cell sums against the ground-truth map (the dataset's
``gt_density_map``, else a map of the annotated points), and with ``keep_maps`` every predicted map, so that the run
exports to the authors' layout with its density maps. ``files/multiclass_final_metrics_<split>.csv`` is the row
the authors' ``multiclass_main_statistics.py`` would write for the run.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from countboard.counting.datasets.mosaic import points_to_density
from countboard.counting.released.multiclass import count_tables, mc_map_name, mc_metrics
from countboard.counting.tasks.praco import prompt_every_class
from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.metrics import bootstrap
from countboard.metrics.praco_multiclass import (
    ALL_CLASS_IMAGES,
    CONVENTION_KEYS,
    localized_class_sums,
    mc_final_metrics_row,
    multiclass_localized_metrics,
    multiclass_units,
)
from countboard.metrics.praco_official import OFFICIAL_GRIDS
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking import tags as tg

log = logging.getLogger(__name__)

#: Record fields: per positive class, ``[TP, FP, AE, GT]`` per grid of ``OFFICIAL_GRIDS`` (flattened), and the maps.
SUMS_FIELD, MAPS_FIELD = "localized_sums", "maps_npz"


class PracoMulticlass(Task):
    """Every multi-class image prompted with every class of its split (MNP, NMN, MAE, RMSE, PCCN, localized).

    The dataset must provide ``counts_of(image_id) -> {class: count}`` (``praco_multiclass`` and
    ``synthetic_multiclass`` do).

    Args:
        all_class_images: ``leave_out`` (images holding every class are not in MNP, NMN macro and PCCN) or
            ``count`` (they count in the divisor, as the authors' scorer does); ``official_mc_*`` always count them.
        keep_maps: Store every predicted density map in the run (``arrays/density_maps.npz``).
    """

    name = "praco_multiclass"
    family = "counters"
    model_kinds = ("counter",)
    dataset_kinds = ("multiclass_counting",)
    model_outputs = ("counts", SUMS_FIELD)
    writes_while_queued = True  # prompt_every_class says when the device has work

    operational_params = {"keep_maps": "whether the predicted maps are saved as well"}

    def __init__(self, all_class_images: str = "leave_out", keep_maps: bool = False):
        if all_class_images not in ALL_CLASS_IMAGES:
            raise ConfigError(f"task.all_class_images={all_class_images!r}: use one of {', '.join(ALL_CLASS_IMAGES)}")
        self.all_class_images = all_class_images
        self.keep_maps = bool(keep_maps)

    def units(self, model: Any, dataset: Any, ctx: RunContext) -> list[str]:
        if not hasattr(dataset, "counts_of"):
            raise ConfigError(f"task=praco_multiclass needs a multi-class dataset (praco_multiclass, "
                              f"synthetic_multiclass); {type(dataset).__name__} has no per-class counts")
        return dataset.image_ids

    def input_keys(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[str]:
        return list(unit_ids)

    def run_units(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        classes = dataset.classes

        def record(item: ImageItem, counts: list[float], maps: list[np.ndarray] | None = None) -> dict:
            gt = dataset.counts_of(item.image_id)
            sums = []
            for k, cls in enumerate(classes):
                if gt[cls] > 0 and maps is not None:
                    truth = _gt_map(dataset, item, cls)
                    cells = localized_class_sums(np.asarray(maps[k]), truth)
                    sums.append(np.concatenate([cells[n] for n in OFFICIAL_GRIDS]).tolist())
            out = {"unit_id": item.image_id, "image_id": item.image_id, "counts": counts,
                   "gt_counts": [int(gt[c]) for c in classes], SUMS_FIELD: sums}
            if self.keep_maps and maps is not None:
                buf = io.BytesIO()
                np.savez_compressed(buf, **{c: np.asarray(m, np.float32) for c, m in zip(classes, maps, strict=True)})
                out[MAPS_FIELD] = buf.getvalue()
            return out

        # a counter whose maps locate nothing (a model that answers one number) gives counts only: no localized sums
        localising = getattr(model, "localising", True)
        return prompt_every_class(model, dataset, unit_ids, classes, ctx, record, with_maps=localising)

    def summarize(self, records: pd.DataFrame, model: Any, dataset: Any, ctx: RunContext) -> TaskResult:
        classes = dataset.classes
        pred = np.stack([np.asarray(v, np.float64) for v in records["counts"]])
        gt = np.stack([np.asarray(v, np.float64) for v in records["gt_counts"]])
        if pred.shape[1] != len(classes):
            raise ConfigError(f"records hold {pred.shape[1]} counts per image but the split has {len(classes)} "
                              "classes; the dataset changed since the checkpoints were written: rerun with force=true")
        metrics = mc_metrics(pred, gt, self.all_class_images)
        intervals = bootstrap.interval_metrics(multiclass_units(pred, gt))
        if self.all_class_images != "leave_out":  # the intervals are of the leave_out values of these keys
            intervals = {k: v for k, v in intervals.items() if not k.startswith(CONVENTION_KEYS)}
        metrics.update(intervals)
        arrays: dict[str, dict[str, np.ndarray]] = {}
        if SUMS_FIELD in records:
            index, rows = [], []
            for i, sums in enumerate(records[SUMS_FIELD]):
                for row in (sums if sums is not None else []):
                    index.append(i)
                    rows.append(np.asarray(row, np.float64).reshape(len(OFFICIAL_GRIDS), 4))
            if rows:
                stacked = np.stack(rows)
                per_grid = {n: stacked[:, k] for k, n in enumerate(OFFICIAL_GRIDS)}
                metrics.update(multiclass_localized_metrics(per_grid, np.array(index)))
        if self.keep_maps and MAPS_FIELD in records:
            arrays["density_maps"] = _maps(records, dataset)
        tables = count_tables(records["image_id"].astype(str).tolist(), list(classes), pred, gt)
        name = f"multiclass_final_metrics_{getattr(dataset, 'split', 'test')}.csv"
        label = str(getattr(model, "name", "") or type(model).__name__)
        pd.DataFrame([mc_final_metrics_row(label, metrics)]).to_csv(ctx.work_dir / name)
        return TaskResult(metrics=metrics, tables=tables, arrays=arrays,
                          files={name: ctx.work_dir / name},
                          tags={tg.PRACO_N_CLASSES: str(len(classes)), tg.BOOTSTRAP: bootstrap.describe(),
                                tg.PRACO_ALL_CLASS_IMAGES: self.all_class_images})


def _gt_map(dataset: Any, item: ImageItem, class_name: str) -> np.ndarray:
    """The dataset's ground-truth map of the class (the release's Gaussian maps), else its annotated points."""
    getter = getattr(dataset, "gt_density_map", None)
    truth = getter(item.image_id, class_name) if getter is not None else None
    if truth is None:
        truth = points_to_density(item.points.get(class_name, np.zeros((0, 2))), item.size)
    return truth


def _maps(records: pd.DataFrame, dataset: Any) -> dict[str, np.ndarray]:
    """Predicted maps (``<img id>_<class>``) and the ground-truth maps the dataset has (``gt:<img id>_<class>``)."""
    out: dict[str, np.ndarray] = {}
    for image_id, blob in zip(records["image_id"], records[MAPS_FIELD], strict=True):
        if blob is None:
            continue
        with np.load(io.BytesIO(blob)) as npz:
            for cls in npz.files:
                out[mc_map_name(str(image_id), cls)[:-4]] = npz[cls]
        getter = getattr(dataset, "gt_density_map", None)
        for cls, count in dataset.counts_of(str(image_id)).items():
            truth = getter(str(image_id), cls) if getter is not None and count > 0 else None
            if truth is not None:
                out["gt:" + mc_map_name(str(image_id), cls)[:-4]] = np.asarray(truth)
    return out
