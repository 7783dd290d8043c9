"""Score PrACo results read from the released layout with both conventions (paper and released scorer).

``score_results`` gives the metrics of ``praco_negative`` and ``praco_mosaic`` (paper definitions, the project's
functions) and the ``official_*`` ones, plus the tables and arrays those tasks log, so that an imported counter
ranks beside a counter run here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.counting.released import HALVES
from countboard.counting.released.layout import (
    MAPS_DIR,
    PracoResults,
    Problem,
    image_stem,
    load_map,
    map_name,
    test2_name,
)
from countboard.metrics.counting import (
    GRIDS,
    localized_mosaic_metrics,
    mosaic_metrics,
    negative_label_metrics,
    pool_grid,
)
from countboard.metrics.praco_official import (
    OFFICIAL_GRIDS,
    final_metrics_row,
    official_localized_metrics,
    official_mosaic_cells,
    official_mosaic_metrics,
    official_negative_metrics,
    official_round,
    resize_keep_sum,
)

PAIR_SEP = "::"


@dataclass
class ScoreOptions:
    """How to score: where the ground-truth maps are, the collage orientation, rounding, what to keep."""

    gt_maps_dir: Path | None = None
    collage: str = "vertical"
    official_rounding: bool = False
    keep_maps: bool = False


@dataclass
class Scored:
    """Metrics and artifacts of one (model, split)."""

    metrics: dict[str, float]
    final_metrics: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if v is not None and np.isfinite(v)}


def _negative(res: PracoResults) -> tuple[dict[str, float], dict[str, pd.DataFrame]]:
    ok = np.isfinite(res.counts).all(axis=1)
    if not ok.any():
        return {}, {}
    counts, gt, pos = res.counts[ok], res.gt[ok], res.pos_idx[ok]
    metrics = negative_label_metrics(counts, gt, pos)
    negatives = counts[~np.eye(len(res.classes), dtype=bool)[pos]]
    metrics["mean_negative_count"] = float(negatives.mean()) if negatives.size else float("nan")
    metrics.update(official_negative_metrics(counts, gt, pos))
    images = np.array(res.images, dtype=object)[ok]
    wide = pd.DataFrame(counts, columns=res.classes)
    wide.insert(0, "image_id", images)
    wide.insert(1, "class_name", [res.classes[k] for k in pos])
    wide.insert(2, "gt", gt)
    long = wide.melt(id_vars=["image_id", "class_name", "gt"], var_name="prompt", value_name="count")
    return metrics, {"negative_counts": wide, "negative_matrix": long[["class_name", "prompt", "image_id", "gt",
                                                                        "count"]]}


def _mosaic_grid(res: PracoResults) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Upper and lower with a mosaic defined only where both halves have a count; rows with any mosaic."""
    missing = np.isnan(res.upper) | np.isnan(res.lower)
    upper, lower = np.where(missing, np.nan, res.upper), np.where(missing, np.nan, res.lower)
    return upper, lower, (~missing).any(axis=1)


def _mosaic(res: PracoResults) -> tuple[dict[str, float], dict[str, pd.DataFrame]]:
    upper, lower, rows = _mosaic_grid(res)
    if not rows.any():
        return {}, {}
    metrics = mosaic_metrics(upper[rows], lower[rows], res.gt[rows])
    metrics.update(official_mosaic_metrics(upper[rows], lower[rows], res.gt[rows], res.pos_idx[rows]))
    r, c = np.nonzero(~np.isnan(upper))
    pairs = pd.DataFrame({
        "unit_id": [f"{res.images[i]}{PAIR_SEP}{res.classes[j]}" for i, j in zip(r, c, strict=True)],
        "image_id": [res.images[i] for i in r], "class_name": [res.classes[res.pos_idx[i]] for i in r],
        "other_class": [res.classes[j] for j in c], "partner_id": [res.partners[i, j] for i, j in zip(r, c, strict=True)],
        "gt": res.gt[r], "c_pos": upper[r, c], "c_neg": lower[r, c]})
    tables = {"mosaic_pairs": pairs}
    for name, values in (("mosaic_upper", upper), ("mosaic_lower", lower)):
        table = pd.DataFrame(values[rows], columns=res.classes)
        table.insert(0, "image_id", np.array(res.images, dtype=object)[rows])
        table.insert(1, "gt", res.gt[rows])
        tables[name] = table
    return metrics, tables


def _localized(res: PracoResults, model_dir: Path, opts: ScoreOptions
               ) -> tuple[dict[str, float], dict[str, dict[str, np.ndarray]], list[Problem]]:
    """Localized metrics of both conventions from the density maps of every defined mosaic."""
    upper, _, _ = _mosaic_grid(res)
    halves = HALVES[opts.collage]
    axis = 0 if opts.collage == "vertical" else 1
    problems: list[Problem] = []
    gt_cache: dict[str, np.ndarray | None] = {}
    units, index, pred_cells, gt_cells = [], [], [], []
    sums: dict[int, list[np.ndarray]] = {n: [] for n in OFFICIAL_GRIDS}
    kept_maps: dict[str, np.ndarray] = {}
    upper_file = test2_name(res.model, res.split, "upper")
    for i, j in zip(*np.nonzero(~np.isnan(upper)), strict=True):
        image_id, other = res.images[i], res.classes[j]
        stem = image_stem(image_id)
        if stem not in gt_cache:
            gt_cache[stem] = _load(opts.gt_maps_dir / f"{stem}.npy", problems, f"ground-truth map of {image_id}")
        names = [map_name(image_id, other, h) for h in halves]
        maps = [_load(model_dir / MAPS_DIR / n, problems, f"mosaic {image_id} / {other!r}") for n in names]
        gt_map = gt_cache[stem]
        if gt_map is None or any(m is None for m in maps):
            problems.append(Problem(upper_file, "-", other, f"image {image_id!r}: mosaic left out of the localized "
                                    "metrics (a density map is missing or unusable)"))
            continue
        for n, s in official_mosaic_cells(maps[0], maps[1], gt_map, opts.collage).items():
            sums[n].append(s)
        pred = np.concatenate([resize_keep_sum(m, gt_map.shape) for m in maps], axis=axis)
        truth = np.concatenate([gt_map, np.zeros_like(gt_map)], axis=axis)
        pred_cells.append(pool_grid(pred, max(GRIDS)))
        gt_cells.append(pool_grid(truth, max(GRIDS)))
        units.append(f"{image_id}{PAIR_SEP}{other}")
        index.append(i)
        if opts.keep_maps:
            kept_maps.update(dict(zip(names, maps, strict=True)))
            kept_maps[f"gt:{stem}"] = gt_map
    if not units:
        return {}, {}, problems
    metrics = localized_mosaic_metrics(np.array(pred_cells), np.array(gt_cells), np.array(index))
    metrics.update(official_localized_metrics({n: np.array(v) for n, v in sums.items()}, np.array(index)))
    arrays = {"mosaic_cells": {"pred": np.array(pred_cells), "gt": np.array(gt_cells), "unit_id": np.array(units)},
              "official_localized": {**{f"div{n * n}": np.array(v) for n, v in sums.items()},
                                     "unit_id": np.array(units)}}
    if kept_maps:
        arrays["density_maps"] = kept_maps
    return metrics, arrays, problems


def _load(path: Path, problems: list[Problem], what: str) -> np.ndarray | None:
    try:
        return load_map(path)
    except FileNotFoundError:
        problems.append(Problem(_short(path), "-", "-", f"{what}: file missing"))
    except (OSError, ValueError) as exc:
        problems.append(Problem(_short(path), "-", "-", f"{what}: unreadable ({exc})"))
    return None


def _short(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def score_results(res: PracoResults, model_dir: str | Path, opts: ScoreOptions | None = None) -> Scored:
    """Both tests with both conventions; localized metrics when ``opts.gt_maps_dir`` is given.

    The ``final_metrics`` table is the released scorer's file: rounded as it rounds (metrics 3 decimals, PCCN 2).
    The ``official_*`` metrics are rounded the same way only with ``opts.official_rounding``.
    """
    opts = opts or ScoreOptions()
    if opts.collage not in HALVES:
        raise ValueError(f"collage {opts.collage!r}: use one of {sorted(HALVES)}")
    metrics, tables = _negative(res)
    mosaic, mosaic_tables = _mosaic(res)
    metrics.update(mosaic)
    tables.update(mosaic_tables)
    arrays: dict[str, dict[str, np.ndarray]] = {}
    problems = list(res.problems)
    if opts.gt_maps_dir is not None:
        local, arrays, map_problems = _localized(res, Path(model_dir), opts)
        metrics.update(local)
        problems += map_problems
    official = {k: v for k, v in metrics.items() if k.startswith("official_")}
    rounded = official_round(official)
    if opts.official_rounding:
        metrics.update(rounded)
    final = pd.DataFrame([final_metrics_row(res.model, rounded)])
    return Scored(_finite(metrics), final, tables, arrays, problems)
