"""The released scorer's values (``official_*``) for the project's PrACo tasks, and their CSV artifact.

``praco_negative`` and ``praco_mosaic`` log the paper's metrics as their main metrics and, beside them, what the
authors' ``main_statistics.py`` would report on the same counts, plus ``files/final_metrics_<split>.csv`` in the
released format (the columns of the other test are empty). With ``official_rounding`` the counts are taken with 2
decimals (as the release stores them) and the ``official_*`` values rounded as the release rounds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from countboard.metrics.praco_official import (
    OFFICIAL_GRIDS,
    final_metrics_row,
    official_localized_metrics,
    official_mosaic_metrics,
    official_round,
)

#: Record field of a mosaic: ``[TP, FP, AE, GT]`` per grid of ``OFFICIAL_GRIDS``, flattened.
SUMS_FIELD = "official_sums"


def stored_counts(values: np.ndarray, rounding: bool) -> np.ndarray:
    """Counts as the release stores them (2 decimals) when ``rounding``; unchanged otherwise."""
    return np.round(values, 2) if rounding else values


def finish(metrics: dict[str, float], rounding: bool) -> dict[str, float]:
    """``metrics`` with its ``official_*`` entries rounded when ``rounding``."""
    if not rounding:
        return metrics
    official = official_round({k: v for k, v in metrics.items() if k.startswith("official_")})
    return {**metrics, **official}


def final_metrics_file(metrics: dict[str, float], model: Any, dataset: Any, work_dir: Path) -> dict[str, Path]:
    """``final_metrics_<split>.csv`` (one row, released columns and rounding) for ``TaskResult.files``."""
    split = str(getattr(dataset, "split", "test"))
    name = f"final_metrics_{split}.csv"
    official = official_round({k: v for k, v in metrics.items() if k.startswith("official_")})
    label = str(getattr(model, "name", "") or type(model).__name__)
    path = Path(work_dir) / name
    pd.DataFrame([final_metrics_row(label, official)]).to_csv(path, index=False)
    return {name: path}


def sums_from_records(column: pd.Series) -> dict[int, np.ndarray]:
    """``{n: (M, 4)}`` per-mosaic sums from the records' ``official_sums`` lists."""
    flat = np.stack([np.asarray(v, np.float64) for v in column]).reshape(len(column), len(OFFICIAL_GRIDS), 4)
    return {n: flat[:, k] for k, n in enumerate(OFFICIAL_GRIDS)}


def mosaic_official(records: pd.DataFrame, upper: np.ndarray, lower: np.ndarray, gt: np.ndarray,
                    images: list[str], classes: list[str], rows: np.ndarray, rounding: bool) -> dict[str, float]:
    """The released scorer's mosaic and localized values of a ``praco_mosaic`` run.

    ``upper`` / ``lower`` are the ``images`` x ``classes`` matrices, ``rows`` the image index of each record; the
    records' ``class_name`` gives each image's own column. Records of older runs may lack the cell sums: then the
    localized values are left out.
    """
    own = records.groupby("image_id")["class_name"].first()
    pos_idx = np.array([classes.index(own[image]) for image in images])
    out = official_mosaic_metrics(stored_counts(upper, rounding), stored_counts(lower, rounding), gt, pos_idx)
    if SUMS_FIELD in records and records[SUMS_FIELD].notna().all():
        out.update(official_localized_metrics(sums_from_records(records[SUMS_FIELD]), rows))
    return finish(out, rounding)
