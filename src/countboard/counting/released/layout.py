"""PrACo results in the layout of the authors' release (``benchmark_results/<MODEL>/``): read and write.

Layout of one model folder::

    Inference_Test1_<MODEL>_<split>.csv        rows: image file names; columns: class names; cell: count
    Inference_Test2_Upper_<MODEL>_<split>.csv  rows: positive image; columns: negative class; own class empty
    Inference_Test2_Lower_<MODEL>_<split>.csv  the same grid, counts on the negative half
    mosaic_image_pairs.csv                     the same grid, cell: file name of the negative image
    density_maps/<img id>_<class>_upper.npy    predicted maps of both halves (``_left`` / ``_right``: horizontal)

Ground-truth density maps ``<img id>.npy`` (``img id`` without ``.jpg``) live in a separate folder. Counts are
written with 2 decimals. Every cell that cannot be scored is reported as ``file:row,column: reason`` (row: line of
the CSV file, the header being line 1) and left out; nothing is scored silently.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.counting.datasets.fsc147 import (
    ANNOTATION_FILE,
    CLASSES_FILE,
    GT_COUNTS_FILE,
    SPLIT_CLASSES_FILE,
    SPLITS_FILE,
    image_stem,
    read_class_file,
)
from countboard.errors import ConfigError, DataNotFoundError
from countboard.resources import PRACO_EXCLUSION_FILE

PAIRS_FILE = "mosaic_image_pairs.csv"
MAPS_DIR = "density_maps"


def read_exclusion_ids(path: str | Path | None) -> set[str]:
    """Stems of the ids listed in ``path`` (one a line, ``#`` comments); ``None``: the bundled PrACo list."""
    path = Path(path) if path is not None else PRACO_EXCLUSION_FILE
    if not path.is_file():
        raise DataNotFoundError(path, "--exclude", "Give a text file with one image id per line.")
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {image_stem(line) for line in lines if line}


def test1_name(model: str, split: str) -> str:
    return f"Inference_Test1_{model}_{split}.csv"


def test2_name(model: str, split: str, half: str) -> str:
    return f"Inference_Test2_{half.capitalize()}_{model}_{split}.csv"


def map_name(image_id: str, class_name: str, half: str) -> str:
    return f"{image_stem(image_id)}_{class_name}_{half}.npy"


@dataclass(frozen=True)
class Problem:
    """A cell (or file) that was left out, and why."""

    file: str
    row: int | str
    column: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.row},{self.column}: {self.reason}"


@dataclass
class PracoMeta:
    """What the scorer needs from FSC-147's metadata for one split."""

    class_of: dict[str, str]
    classes: list[str]
    gt: dict[str, float]
    expected: list[str]
    excluded: set[str]


def _gt_counts(meta_dir: Path) -> dict[str, float]:
    """Ground-truth counts: ``len(points)`` of the annotation file, else ``gt_cnts_FSC147.json``."""
    counts_file, ann_file = meta_dir / GT_COUNTS_FILE, meta_dir / ANNOTATION_FILE
    if not counts_file.is_file() and not ann_file.is_file():
        raise DataNotFoundError(meta_dir, "--fsc147", f"Expected {ANNOTATION_FILE} (points) or {GT_COUNTS_FILE}.")
    counts = {k: float(v) for k, v in json.loads(counts_file.read_text()).items()} if counts_file.is_file() else {}
    if ann_file.is_file():
        for image_id, ann in json.loads(ann_file.read_text()).items():
            if "points" in ann:
                counts[image_id] = float(len(ann["points"]))
    return counts


def read_meta(meta_dir: str | Path, split: str = "test", exclude: str | Path | None = None) -> PracoMeta:
    """Classes, ground truth and expected images of ``split`` from an FSC-147 metadata folder.

    Args:
        meta_dir: Holds ``ImageClasses_FSC147.txt``, ``Split_Classes_FSC147.json`` and the counts
            (``annotation_FSC147_384.json`` points or ``gt_cnts_FSC147.json``); ``Train_Test_Val_FSC_147.json``
            when present narrows the expected images to the split's.
        split: Key of ``Split_Classes_FSC147.json``.
        exclude: Exclusion list (ids with or without ``.jpg``); ``None``: the bundled list of the 38 multi-class
            test images.
    """
    meta_dir = Path(meta_dir)
    for name in (CLASSES_FILE, SPLIT_CLASSES_FILE):
        if not (meta_dir / name).is_file():
            raise DataNotFoundError(meta_dir / name, "--fsc147", "Point --fsc147 at FSC-147's metadata folder.")
    class_of = read_class_file(meta_dir / CLASSES_FILE)
    split_classes = json.loads((meta_dir / SPLIT_CLASSES_FILE).read_text())
    if split not in split_classes:
        raise ConfigError(f"split {split!r} is not in {meta_dir / SPLIT_CLASSES_FILE}; use one of {sorted(split_classes)}")
    classes = list(split_classes[split])
    excluded = read_exclusion_ids(exclude)
    wanted = set(classes)
    candidates = [i for i, c in class_of.items() if c in wanted]
    if (meta_dir / SPLITS_FILE).is_file():
        in_split = set(json.loads((meta_dir / SPLITS_FILE).read_text()).get(split, candidates))
        candidates = [i for i in candidates if i in in_split]
    expected = [i for i in candidates if image_stem(i) not in excluded]
    return PracoMeta(class_of, classes, _gt_counts(meta_dir), expected, excluded)


@dataclass
class PracoResults:
    """One model's results on one split, on the grid ``images x classes`` (NaN: no usable value)."""

    model: str
    split: str
    images: list[str]
    classes: list[str]
    gt: np.ndarray
    pos_idx: np.ndarray
    counts: np.ndarray
    upper: np.ndarray
    lower: np.ndarray
    partners: np.ndarray
    problems: list[Problem] = field(default_factory=list)
    n_excluded: int = 0


def _parse(value: str) -> float | None:
    try:
        out = float(value)
    except ValueError:
        return None
    return out


def read_grid(path: Path, meta: PracoMeta, problems: list[Problem], *, positive_empty: bool,
              numeric: bool = True) -> pd.DataFrame:
    """A results CSV as ``images x split classes`` (known, non-excluded rows only), each bad cell reported."""
    name = path.name
    raw = pd.read_csv(path, index_col=0, dtype=str, keep_default_na=False)
    for col in raw.columns:
        if col not in meta.classes:
            problems.append(Problem(name, 1, col, "not a class of the split: column left out"))
    for col in meta.classes:
        if col not in raw.columns:
            problems.append(Problem(name, 1, col, "class of the split without a column: its cells are missing "
                                    "(Test 1 leaves out every image, Test 2 these mosaics)"))
    out = pd.DataFrame(np.nan if numeric else None, index=pd.Index([], dtype=object), columns=meta.classes,
                       dtype=float if numeric else object)
    rows = {}
    for line, (image_id, cells) in enumerate(raw.iterrows(), start=2):
        image_id = str(image_id).strip()
        if image_stem(image_id) in meta.excluded:
            continue
        if image_id not in meta.class_of:
            problems.append(Problem(name, line, "-", f"unknown image {image_id!r} (not in {CLASSES_FILE}): row left out"))
            continue
        if meta.class_of[image_id] not in meta.classes:
            problems.append(Problem(name, line, "-", f"image {image_id!r} is of class {meta.class_of[image_id]!r}, "
                                    "not a class of the split: row left out"))
            continue
        if image_id in rows:
            problems.append(Problem(name, line, "-", f"second row of image {image_id!r}: left out (the first is used)"))
            continue
        own = meta.class_of[image_id]
        row = {}
        for col in meta.classes:
            if col not in raw.columns:
                continue
            text = str(cells[col]).strip()
            if col == own and positive_empty:
                if text and text.lower() != "nan":
                    problems.append(Problem(name, line, col, f"the positive class's cell holds {text!r}; ignored"))
                continue
            if not numeric:
                row[col] = text if text and text.lower() != "nan" else None
                continue
            value = _parse(text) if text else None
            if value is None or not np.isfinite(value):
                problems.append(Problem(name, line, col, "empty cell" if not text else f"no count ({text!r})"))
                continue
            row[col] = value
        rows[image_id] = row
    if rows:
        out = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=meta.classes)
        if numeric:
            out = out.astype(float)
    return out


def read_results(model_dir: str | Path, meta: PracoMeta, split: str = "test", model: str | None = None
                 ) -> PracoResults:
    """Read Test 1, Test 2 and the mosaic pairs of one model folder (density maps are read by the scorer).

    Missing files, unknown images and classes, empty or non-numeric cells, images of the split without a row
    and images without ground truth are reported in ``problems``; those cells are left out of every metric.
    """
    model_dir = Path(model_dir)
    model = model or model_dir.name
    problems: list[Problem] = []
    grids = {}
    for key, name, empty in (("counts", test1_name(model, split), False),
                             ("upper", test2_name(model, split, "upper"), True),
                             ("lower", test2_name(model, split, "lower"), True)):
        path = model_dir / name
        if not path.is_file():
            problems.append(Problem(name, "-", "-", "file missing: its metrics are left out"))
            grids[key] = pd.DataFrame(columns=meta.classes, dtype=float)
            continue
        grids[key] = read_grid(path, meta, problems, positive_empty=empty)
    pairs_path = model_dir / PAIRS_FILE
    pairs = (read_grid(pairs_path, meta, problems, positive_empty=True, numeric=False) if pairs_path.is_file()
             else pd.DataFrame(columns=meta.classes, dtype=object))
    present = set().union(*(set(g.index) for g in grids.values()))
    for key, grid in grids.items():
        name = test1_name(model, split) if key == "counts" else test2_name(model, split, key)
        if (model_dir / name).is_file():
            for image_id in meta.expected:
                if image_id not in grid.index:
                    problems.append(Problem(name, "-", "-", f"image {image_id!r} of the split has no row"))
    images = [i for i in meta.expected if i in present] + sorted(present - set(meta.expected))
    keep = []
    for image_id in images:
        if image_id in meta.gt:
            keep.append(image_id)
        else:
            problems.append(Problem(ANNOTATION_FILE, "-", image_id, "no ground-truth count (no `points`, not in "
                                    f"{GT_COUNTS_FILE}): image left out"))
    images = keep
    n_excluded = sum(1 for i in meta.class_of if image_stem(i) in meta.excluded and meta.class_of[i] in meta.classes)
    return PracoResults(
        model=model, split=split, images=images, classes=list(meta.classes),
        gt=np.array([meta.gt[i] for i in images], np.float64),
        pos_idx=np.array([meta.classes.index(meta.class_of[i]) for i in images], np.int64),
        counts=grids["counts"].reindex(index=images, columns=meta.classes).to_numpy(np.float64),
        upper=grids["upper"].reindex(index=images, columns=meta.classes).to_numpy(np.float64),
        lower=grids["lower"].reindex(index=images, columns=meta.classes).to_numpy(np.float64),
        partners=pairs.reindex(index=images, columns=meta.classes).to_numpy(object),
        problems=problems, n_excluded=n_excluded)


def load_map(path: Path) -> np.ndarray:
    """A density map as float64 ``(H, W)``; raises ``ValueError`` with the reason when unusable."""
    arr = np.load(path, allow_pickle=False)
    arr = np.squeeze(np.asarray(arr, np.float64))
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D map, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("the map holds NaN or infinite values")
    return arr


def _write_grid(path: Path, values: np.ndarray, images: Sequence[str], classes: Sequence[str],
                round_counts: bool = True) -> None:
    frame = pd.DataFrame(values, index=list(images), columns=list(classes))
    if round_counts:
        frame = frame.astype(float).round(2)
    frame.to_csv(path)


def write_results(out_dir: str | Path, res: PracoResults, maps: dict[str, np.ndarray] | None = None,
                  gt_maps: dict[str, np.ndarray] | None = None, gt_dir: str | Path | None = None) -> Path:
    """Write ``res`` in the released layout under ``out_dir/<model>/`` (counts with 2 decimals).

    Args:
        out_dir: Parent folder (``benchmark_results``).
        res: The results; NaN cells are written empty.
        maps: Predicted half maps by file name (``map_name``), written to ``density_maps/``.
        gt_maps: Ground-truth maps by ``img id``, written to ``gt_dir`` as ``<img id>.npy``.
        gt_dir: Folder of the ground-truth maps (default: ``out_dir/gt_density_maps``).

    Returns:
        The model folder.
    """
    folder = Path(out_dir) / res.model
    folder.mkdir(parents=True, exist_ok=True)
    _write_grid(folder / test1_name(res.model, res.split), res.counts, res.images, res.classes)
    _write_grid(folder / test2_name(res.model, res.split, "upper"), res.upper, res.images, res.classes)
    _write_grid(folder / test2_name(res.model, res.split, "lower"), res.lower, res.images, res.classes)
    _write_grid(folder / PAIRS_FILE, res.partners, res.images, res.classes, round_counts=False)
    if maps:
        (folder / MAPS_DIR).mkdir(exist_ok=True)
        for name, arr in maps.items():
            np.save(folder / MAPS_DIR / name, np.asarray(arr, np.float32))
    if gt_maps:
        gt_dir = Path(gt_dir) if gt_dir is not None else Path(out_dir) / "gt_density_maps"
        gt_dir.mkdir(parents=True, exist_ok=True)
        for stem, arr in gt_maps.items():
            np.save(gt_dir / f"{stem}.npy", np.asarray(arr, np.float32))
    return folder
