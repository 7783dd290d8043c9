"""PrACo++ (multi-class) results in the authors' released layout: read, score, write.

Layout of one model folder (``multiclass_benchmark_results/<MODEL>/``)::

    multiclass_<MODEL>_<split>1.csv     rows: image file names; columns: the split's classes; cell: count
    density_maps/<img id>_<class>.npy   predicted map of every (image, prompted class)

The metadata folder is the PrACo++ one (``multiclass_split_images.json``, ``multiclass_split_classes.json``,
``multiclass_class_counts_per_image.json``; ``multiclass_image_classes.txt`` names each image's classes); the
ground-truth maps ``<img id>_<class>.npy`` are in its ``density_maps/`` (or ``--gt-density-maps``). Counts are
written with 2 decimals. Every cell that cannot be scored is reported as ``file:row,column: reason`` and left out
(an image with such a cell is left out of the count metrics; a missing map leaves its pair out of the localized
ones).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.counting.datasets.praco_multiclass import CLASS_COUNTS, SPLIT_CLASSES, SPLIT_IMAGES
from countboard.counting.released.layout import MAPS_DIR, Problem, load_map
from countboard.counting.released.scoring import Scored
from countboard.errors import ConfigError, DataNotFoundError
from countboard.metrics.praco_multiclass import (
    ALL_CLASS_IMAGES,
    localized_class_sums,
    mc_final_metrics_row,
    multiclass_localized_metrics,
    multiclass_metrics,
    official_multiclass_metrics,
)
from countboard.metrics.praco_official import OFFICIAL_GRIDS

IMAGE_CLASSES = "multiclass_image_classes.txt"
PAIR_SEP = "::"


def mc_results_name(model: str, split: str) -> str:
    """``multiclass_<model>_<split>1.csv``, the file the authors' ``multiclass_main.py`` writes."""
    return f"multiclass_{model}_{split}1.csv"


def mc_map_name(image_id: str, class_name: str) -> str:
    """``<img id>_<class>.npy`` (``img id`` without its extension)."""
    return f"{Path(image_id).stem}_{class_name}.npy"


def is_multiclass_folder(model_dir: str | Path, model: str | None = None, split: str = "test") -> bool:
    model_dir = Path(model_dir)
    return (model_dir / mc_results_name(model or model_dir.name, split)).is_file()


@dataclass
class McMeta:
    """What the scorer needs from the PrACo++ metadata for one split."""

    classes: list[str]
    images: list[str]
    gt: dict[str, dict[str, float]]
    gt_maps_dir: Path | None


def read_mc_meta(meta_dir: str | Path, split: str = "test", gt_maps_dir: str | Path | None = None) -> McMeta:
    """Classes, images and per-class counts of ``split``; the ground-truth maps folder (``gt_maps_dir``, else
    ``meta_dir/density_maps`` when it exists, else none: no localized metrics)."""
    meta_dir = Path(meta_dir)
    for name in (SPLIT_IMAGES, SPLIT_CLASSES, CLASS_COUNTS):
        if not (meta_dir / name).is_file():
            raise DataNotFoundError(meta_dir / name, "--multiclass", "Point --multiclass at the PrACo++ metadata "
                                    "folder (data/multiclass-dataset of the PrACo repository).")
    images = json.loads((meta_dir / SPLIT_IMAGES).read_text())
    classes = json.loads((meta_dir / SPLIT_CLASSES).read_text())
    if split not in images or split not in classes:
        raise ConfigError(f"split {split!r} is not in {meta_dir / SPLIT_IMAGES}; use one of {sorted(images)}")
    counts = json.loads((meta_dir / CLASS_COUNTS).read_text())
    gt = {i: {c: float(v) for c, v in counts[i].items()} for i in images[split] if i in counts}
    if gt_maps_dir is not None:
        maps = Path(gt_maps_dir)
        if not maps.is_dir():
            raise DataNotFoundError(maps, "--gt-density-maps", "Give the folder of ground-truth maps "
                                    "<img id>_<class>.npy.")
    else:
        maps = meta_dir / MAPS_DIR if (meta_dir / MAPS_DIR).is_dir() else None
    return McMeta(list(classes[split]), list(images[split]), gt, maps)


@dataclass
class McResults:
    """One model's multi-class results: ``pred`` and ``gt`` are ``images x classes``."""

    model: str
    split: str
    images: list[str]
    classes: list[str]
    pred: np.ndarray
    gt: np.ndarray
    problems: list[Problem] = field(default_factory=list)


def read_mc_results(model_dir: str | Path, meta: McMeta, split: str = "test", model: str | None = None
                    ) -> McResults:
    """Read ``multiclass_<model>_<split>1.csv``; every unusable cell, row or column is a ``Problem``."""
    model_dir = Path(model_dir)
    model = model or model_dir.name
    name = mc_results_name(model, split)
    path = model_dir / name
    if not path.is_file():
        raise DataNotFoundError(path, "MODEL_DIR", f"Expected {name}; check --model and --split.")
    raw = pd.read_csv(path, index_col=0, dtype=str, keep_default_na=False)
    problems = [Problem(name, 1, c, "not a class of the split: column left out")
                for c in raw.columns if c not in meta.classes]
    absent = [c for c in meta.classes if c not in raw.columns]
    problems += [Problem(name, 1, c, "class of the split without a column: every image is left out")
                 for c in absent]
    rows: dict[str, list[float]] = {}
    for line, (image_id, cells) in enumerate(raw.iterrows(), start=2):
        image_id = str(image_id).strip()
        if image_id not in meta.gt:
            problems.append(Problem(name, line, "-", f"image {image_id!r} is not in the split's {SPLIT_IMAGES} "
                                    f"with counts in {CLASS_COUNTS}: row left out"))
            continue
        if image_id in rows:
            problems.append(Problem(name, line, "-", f"second row of image {image_id!r}: left out (the first is used)"))
            continue
        values, bad = [], False
        for col in meta.classes:
            text = str(cells[col]).strip() if col in raw.columns else ""
            try:
                value = float(text)
            except ValueError:
                value = float("nan")
            if col in raw.columns and not np.isfinite(value):
                problems.append(Problem(name, line, col, ("empty cell" if not text else f"no count ({text!r})")
                                        + ": image left out"))
            bad |= not np.isfinite(value)
            values.append(value)
        if not bad:
            rows[image_id] = values
    problems += [Problem(name, "-", "-", f"image {i!r} of the split has no row") for i in meta.images
                 if i in meta.gt and i not in rows and i not in set(raw.index.astype(str).str.strip())]
    images = [i for i in meta.images if i in rows]
    pred = np.array([rows[i] for i in images], np.float64).reshape(len(images), len(meta.classes))
    gt = np.array([[meta.gt[i].get(c, 0.0) for c in meta.classes] for i in images], np.float64)
    return McResults(model, split, images, list(meta.classes), pred, gt.reshape(pred.shape), problems)


def count_tables(images: list[str], classes: list[str], pred: np.ndarray, gt: np.ndarray
                 ) -> dict[str, pd.DataFrame]:
    """The tables ``praco_multiclass`` logs: ``multiclass_counts``, ``multiclass_gt``, ``multiclass_matrix``."""
    wide = pd.DataFrame(pred, columns=classes)
    wide.insert(0, "image_id", np.array(images, dtype=object))
    truth = pd.DataFrame(gt.astype(int), columns=classes)
    truth.insert(0, "image_id", np.array(images, dtype=object))
    long = wide.melt(id_vars="image_id", var_name="prompt", value_name="count")
    long["gt"] = truth.melt(id_vars="image_id", var_name="prompt", value_name="gt")["gt"].to_numpy()
    long["positive"] = long["gt"] > 0
    return {"multiclass_counts": wide, "multiclass_gt": truth, "multiclass_matrix": long}


def mc_metrics(pred: np.ndarray, gt: np.ndarray, all_class_images: str = "leave_out") -> dict[str, float]:
    """The project's multi-class metrics under ``all_class_images`` and the authors' ``official_mc_*`` beside them."""
    return {**multiclass_metrics(pred, gt, all_class_images), **official_multiclass_metrics(pred, gt)}


def _localized(res: McResults, model_dir: Path, gt_dir: Path, keep_maps: bool
               ) -> tuple[dict[str, float], dict[str, dict[str, np.ndarray]], list[Problem]]:
    problems: list[Problem] = []
    sums: dict[int, list[np.ndarray]] = {n: [] for n in OFFICIAL_GRIDS}
    units, index, kept = [], [], {}
    name = mc_results_name(res.model, res.split)
    for i, j in zip(*np.nonzero(res.gt > 0), strict=True):
        image_id, cls = res.images[i], res.classes[j]
        file = mc_map_name(image_id, cls)
        maps = []
        for folder, what in ((gt_dir, "ground-truth"), (model_dir / MAPS_DIR, "predicted")):
            try:
                maps.append(load_map(folder / file))
            except FileNotFoundError:
                problems.append(Problem(f"{folder.name}/{file}", "-", "-", f"{what} map missing"))
            except (OSError, ValueError) as exc:
                problems.append(Problem(f"{folder.name}/{file}", "-", "-", f"{what} map unreadable ({exc})"))
        if len(maps) < 2:
            problems.append(Problem(name, "-", cls, f"image {image_id!r}: left out of the localized metrics"))
            continue
        for n, s in localized_class_sums(maps[1], maps[0]).items():
            sums[n].append(s)
        units.append(f"{image_id}{PAIR_SEP}{cls}")
        index.append(i)
        if keep_maps:
            kept[f"gt:{Path(file).stem}"] = maps[0]
    if keep_maps:
        for image_id in res.images:
            for cls in res.classes:
                file = mc_map_name(image_id, cls)
                if (model_dir / MAPS_DIR / file).is_file():
                    kept[Path(file).stem] = load_map(model_dir / MAPS_DIR / file)
    if not units:
        return {}, {"density_maps": kept} if kept else {}, problems
    arrays = {"mc_localized": {**{f"div{n * n}": np.array(v) for n, v in sums.items()}, "unit_id": np.array(units)}}
    if kept:
        arrays["density_maps"] = kept
    return multiclass_localized_metrics({n: np.array(v) for n, v in sums.items()}, np.array(index)), arrays, problems


def score_mc_results(res: McResults, model_dir: str | Path, gt_maps_dir: Path | None, *, keep_maps: bool = False,
                     all_class_images: str = "leave_out") -> Scored:
    """Count metrics (both conventions), localized metrics when ground-truth maps are given, tables, arrays and
    ``multiclass_final_metrics_<split>.csv`` (the authors' values, 3 decimals)."""
    if all_class_images not in ALL_CLASS_IMAGES:
        raise ConfigError(f"--all-class-images {all_class_images!r}: use one of {', '.join(ALL_CLASS_IMAGES)}")
    metrics = mc_metrics(res.pred, res.gt, all_class_images) if len(res.images) else {}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    problems = list(res.problems)
    if gt_maps_dir is not None and len(res.images):
        local, arrays, map_problems = _localized(res, Path(model_dir), gt_maps_dir, keep_maps)
        metrics.update(local)
        problems += map_problems
    final = pd.DataFrame([mc_final_metrics_row(res.model, metrics)])
    finite = {k: float(v) for k, v in metrics.items() if v is not None and np.isfinite(v)}
    return Scored(finite, final, count_tables(res.images, res.classes, res.pred, res.gt), arrays, problems)


def write_mc_results(out_dir: str | Path, model: str, split: str, images: list[str], classes: list[str],
                     pred: np.ndarray, maps: dict[str, np.ndarray] | None = None,
                     gt_maps: dict[str, np.ndarray] | None = None, gt_dir: str | Path | None = None) -> Path:
    """Write ``out_dir/<model>/multiclass_<model>_<split>1.csv`` (2 decimals) and the maps (``maps``: by
    ``<img id>_<class>``; ``gt_maps`` the same, to ``gt_dir``, default ``out_dir/gt_density_maps``)."""
    folder = Path(out_dir) / model
    folder.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(np.asarray(pred, np.float64), index=list(images), columns=list(classes)).round(2)
    frame.to_csv(folder / mc_results_name(model, split))
    for target, arrays in ((folder / MAPS_DIR, maps),
                           (Path(gt_dir) if gt_dir else Path(out_dir) / "gt_density_maps", gt_maps)):
        if arrays:
            target.mkdir(parents=True, exist_ok=True)
            for stem, arr in arrays.items():
                np.save(target / f"{stem}.npy", np.asarray(arr, np.float32))
    return folder

