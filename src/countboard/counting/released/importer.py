"""PrACo results in the authors' released layout as one MLflow run (the command is ``countboard import-praco``).

The run holds the paper's metrics (as ``praco_negative`` / ``praco_mosaic`` compute them), the released scorer's
(``official_*``), ``files/final_metrics_<split>.csv``, the count tables and cells those tasks log, and ``problems.json``
(every cell left out, as ``file:row,column: reason``). Tags: ``model``, ``model_kind=counter``, ``task=praco``,
``dataset=fsc147``, ``split``, ``family=counters``, ``source=praco_release`` and a ``config_hash`` of the input
files and options, so importing the same files again is skipped.

A PrACo++ folder (``multiclass_<MODEL>_<split>1.csv``) is scored by ``countboard.counting.released.multiclass``
and logged as ``task=praco_multiclass``, ``dataset=praco_multiclass``, beside the runs of that task.

Example:
    countboard import-praco benchmark_results/CountGD --fsc147 data/fsc147_meta --gt-density-maps gt_maps
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from countboard.counting.released import HALVES
from countboard.counting.released.layout import (
    MAPS_DIR,
    read_meta,
    read_results,
    test1_name,
    test2_name,
)
from countboard.counting.released.multiclass import (
    is_multiclass_folder,
    mc_results_name,
    read_mc_meta,
    read_mc_results,
    score_mc_results,
)
from countboard.counting.released.scoring import Scored, ScoreOptions, score_results
from countboard.errors import ConfigError, DataNotFoundError
from countboard.fingerprint import path_fingerprint
from countboard.tracking import tags as tg
from countboard.tracking.datasets import DatasetRef
from countboard.tracking.experiments import DEFAULT_PATTERN
from countboard.tracking.tags import RunTags

TASK = "praco"
DATASET = "fsc147"
MC_TASK = MC_DATASET = "praco_multiclass"
FAMILY = "counters"
#: Bump when scoring changes, so that a re-import logs a new run instead of skipping.
SCORING_VERSION = "1"


@dataclass
class ImportResult:
    """What ``import_praco`` did."""

    run_id: str | None
    scored: Scored
    tags: RunTags


def _digest(model_dir: Path, gt_dir: Path | None, exclude: Path | None, options: dict) -> str:
    """Hash of every input file's bytes and of the options (density maps by name and size, for speed)."""
    h = hashlib.sha256(json.dumps(options, sort_keys=True).encode())
    for path in sorted(p for p in model_dir.glob("*.csv")):
        h.update(path.name.encode() + path.read_bytes())
    for folder in (model_dir / MAPS_DIR, gt_dir):
        if folder is not None and folder.is_dir():
            for path in sorted(folder.glob("*.npy")):
                h.update(f"{path.name}:{path.stat().st_size}".encode())
    if exclude is not None:
        h.update(exclude.read_bytes())
    return h.hexdigest()[:16]


def write_artifacts(scored: Scored, split: str, root: Path, final_name: str = "final_metrics") -> None:
    """The run's artifacts in the layout the project's tasks use (``tables/``, ``arrays/``, ``files/``)."""
    (root / "files").mkdir()
    # the authors' multi-class scorer writes its row index as a first, unnamed column
    scored.final_metrics.to_csv(root / "files" / f"{final_name}_{split}.csv",
                                index=final_name == "multiclass_final_metrics")
    (root / "problems.json").write_text(json.dumps([str(p) for p in scored.problems], indent=1))
    if scored.tables:
        (root / "tables").mkdir()
        for name, table in scored.tables.items():
            table.to_parquet(root / "tables" / f"{name}.parquet", index=False)
    if scored.arrays:
        (root / "arrays").mkdir()
        for name, arrays in scored.arrays.items():
            np.savez_compressed(root / "arrays" / f"{name}.npz", **arrays)


def import_praco(model_dir: str | Path, meta_dir: str | Path, tracker=None, *, split: str = "test",
                 gt_maps_dir: str | Path | None = None, exclude: str | Path | None = None,
                 collage: str = "vertical", model: str | None = None, official_rounding: bool = False,
                 keep_maps: bool = False, experiment: str = DEFAULT_PATTERN, force: bool = False,
                 all_class_images: str = "leave_out") -> ImportResult:
    """Score one model folder and log it (``tracker=None``: score only).

    A PrACo++ folder (``multiclass_<model>_<split>1.csv``) takes the PrACo++ metadata folder as ``meta_dir``
    (ground-truth maps from ``gt_maps_dir``, else ``meta_dir/density_maps``); ``collage`` and ``exclude`` do
    not apply to it.

    Args:
        model_dir: ``benchmark_results/<MODEL>/`` in the released layout.
        meta_dir: FSC-147 metadata folder (classes, class splits, counts).
        tracker: A ``countboard.tracking.Tracker``; ``None`` logs nothing.
        split: Split name in the file names and in ``Split_Classes_FSC147.json``.
        gt_maps_dir: Folder of ground-truth density maps ``<img id>.npy``; without it no localized metrics.
        exclude: Exclusion list (default: the bundled list of the 38 multi-class test images).
        collage: ``vertical`` (``_upper`` / ``_lower`` maps) or ``horizontal`` (``_left`` / ``_right``).
        model: Model name in the file names (default: the folder's name).
        official_rounding: Log the ``official_*`` metrics rounded as the released scorer rounds them.
        keep_maps: Store the density maps in the run (``arrays/density_maps.npz``), so that export gives them back.
        experiment: MLflow experiment, or a pattern filled with the run's family (``tracking.experiments``).
        force: Log again even if a finished run has the same ``config_hash``.
        all_class_images: PrACo++ only: ``leave_out`` or ``count`` the images holding every class in MNP, NMN
            (macro) and PCCN (``official_mc_*`` always count them, as the authors do).
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise DataNotFoundError(model_dir, "MODEL_DIR", "Give a folder benchmark_results/<MODEL>/ of the release.")
    if is_multiclass_folder(model_dir, model, split):
        return _import_multiclass(model_dir, meta_dir, tracker, split=split, gt_maps_dir=gt_maps_dir, model=model,
                                  keep_maps=keep_maps, experiment=experiment, force=force,
                                  all_class_images=all_class_images)
    if collage not in HALVES:
        raise ValueError(f"--collage {collage!r}: use one of {sorted(HALVES)}")
    gt_dir = Path(gt_maps_dir) if gt_maps_dir is not None else None
    if gt_dir is not None and not gt_dir.is_dir():
        raise DataNotFoundError(gt_dir, "--gt-density-maps", "Give the folder of ground-truth maps <img id>.npy.")
    model = model or model_dir.name
    expected = [test1_name(model, split), test2_name(model, split, "upper"), test2_name(model, split, "lower")]
    if not any((model_dir / name).is_file() for name in expected):
        raise DataNotFoundError(model_dir, "MODEL_DIR", f"None of {', '.join(expected)} (PrACo) or "
                                f"{mc_results_name(model, split)} (PrACo++) is there; check the folder, "
                                "--model (the name in the file names) and --split.")
    meta = read_meta(meta_dir, split, exclude)
    results = read_results(model_dir, meta, split, model)
    opts = ScoreOptions(gt_maps_dir=gt_dir, collage=collage, official_rounding=official_rounding,
                        keep_maps=keep_maps)
    scored = score_results(results, model_dir, opts)
    options = {"model": model, "split": split, "collage": collage, "official_rounding": official_rounding,
               "keep_maps": keep_maps, "localized": gt_dir is not None, "scoring": SCORING_VERSION}
    tags = RunTags(model=model, model_kind="counter", task=TASK, dataset=DATASET, split=split, family=FAMILY,
                   source=tg.SOURCE_PRACO_RELEASE, extra={tg.PRACO_ORIENTATION: collage},
                   config_hash=_digest(model_dir, gt_dir, Path(exclude) if exclude else None, options))
    if tracker is None:
        return ImportResult(None, scored, tags)
    tracker.check()
    params = {**options, "model_dir": str(model_dir.resolve()), "fsc147": str(Path(meta_dir).resolve()),
              "gt_density_maps": str(gt_dir.resolve()) if gt_dir else "", "exclude": str(exclude or "bundled"),
              "n_images": len(results.images), "n_excluded": results.n_excluded,
              "n_problems": len(scored.problems)}
    datasets = released_datasets(DATASET, meta_dir, model_dir, split)
    return ImportResult(_log(tracker, scored, split, experiment, tags, params, force, datasets=datasets), scored,
                        tags)


def released_datasets(name: str, meta_dir: str | Path, model_dir: Path, split: str) -> list[DatasetRef]:
    """What an import was scored from, as MLflow tracks datasets: the benchmark's metadata (``name``, context: the
    split) and the released results folder of the model (context ``predictions``)."""
    meta = Path(meta_dir).resolve()
    return [DatasetRef(name, path_fingerprint(meta), str(meta), split),
            DatasetRef(f"praco_release/{model_dir.name}", path_fingerprint(model_dir), str(model_dir.resolve()),
                       "predictions")]


def _log(tracker, scored: Scored, split: str, experiment: str, tags: RunTags, params: dict, force: bool,
         final_name: str = "final_metrics", datasets: list[DatasetRef] | None = None) -> str | None:
    name = f"model={tags.model},dataset={tags.dataset},split={split},task={tags.task}"
    with tempfile.TemporaryDirectory() as tmp:
        write_artifacts(scored, split, Path(tmp), final_name)
        return tracker.log_complete_run(experiment, name, tags.to_tags(), params=params, metrics=scored.metrics,
                                        artifacts_dir=tmp, force=force, datasets=datasets or ())


def _import_multiclass(model_dir: Path, meta_dir: str | Path, tracker, *, split: str, gt_maps_dir, model,
                       keep_maps: bool, experiment: str, force: bool, all_class_images: str) -> ImportResult:
    """A PrACo++ folder: the count metrics of both conventions and the localized ones, as ``praco_multiclass``."""
    model = model or model_dir.name
    meta = read_mc_meta(meta_dir, split, gt_maps_dir)
    results = read_mc_results(model_dir, meta, split, model)
    scored = score_mc_results(results, model_dir, meta.gt_maps_dir, keep_maps=keep_maps,
                              all_class_images=all_class_images)
    options = {"model": model, "split": split, "keep_maps": keep_maps, "all_class_images": all_class_images,
               "localized": meta.gt_maps_dir is not None, "scoring": SCORING_VERSION}
    tags = RunTags(model=model, model_kind="counter", task=MC_TASK, dataset=MC_DATASET, split=split, family=FAMILY,
                   source=tg.SOURCE_PRACO_RELEASE, config_hash=_digest(model_dir, meta.gt_maps_dir, None, options))
    if tracker is None:
        return ImportResult(None, scored, tags)
    tracker.check()
    params = {**options, "model_dir": str(model_dir.resolve()), "multiclass": str(Path(meta_dir).resolve()),
              "gt_density_maps": str(meta.gt_maps_dir.resolve()) if meta.gt_maps_dir else "",
              "n_images": len(results.images), "n_problems": len(scored.problems)}
    run_id = _log(tracker, scored, split, experiment, tags, params, force, "multiclass_final_metrics",
                  released_datasets(MC_DATASET, meta_dir, model_dir, split))
    return ImportResult(run_id, scored, tags)


def import_folders(model_dirs: list[str | Path], meta_dir: str | Path | None, tracker, *,
                   multiclass_meta: str | Path | None = None, final_metrics: str | Path | None = None,
                   **options) -> list[ImportResult]:
    """``import_praco`` for each folder (one run each): ``meta_dir`` (FSC-147) for PrACo folders,
    ``multiclass_meta`` (PrACo++) for multi-class ones; ``final_metrics``: also write the released final metrics
    file with one row per folder."""
    if options.get("model") and len(model_dirs) > 1:
        raise ConfigError("--model names the files of one folder: give one MODEL_DIR with it")
    metas = []
    for model_dir in model_dirs:
        multi = is_multiclass_folder(model_dir, options.get("model"), options.get("split", "test"))
        meta, flag = (multiclass_meta, "--multiclass") if multi else (meta_dir, "--fsc147")
        if meta is None:
            kind = "a PrACo++ (multiclass_*_test1.csv)" if multi else "a PrACo (Inference_Test*)"
            raise ConfigError(f"{model_dir} is {kind} result folder: give its metadata folder with {flag} META_DIR")
        metas.append(meta)
    results = [import_praco(d, m, tracker, **options) for d, m in zip(model_dirs, metas, strict=True)]
    if final_metrics is not None:
        import pandas as pd

        table = pd.concat([r.scored.final_metrics for r in results], ignore_index=True)
        table.to_csv(final_metrics, index=all(r.tags.task == MC_TASK for r in results))
    return results
