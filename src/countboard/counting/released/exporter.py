"""Project runs written in the authors' released layout, for their scorer (the command is ``countboard export-praco``).

Takes one or more runs of one counter (an imported ``praco`` run, or a ``praco_negative`` and a ``praco_mosaic``
run) and writes ``OUT/<MODEL>/`` with ``Inference_Test1_*``, ``Inference_Test2_{Upper,Lower}_*``,
``mosaic_image_pairs.csv`` and, when the run kept them, ``density_maps/`` and the ground-truth maps
(``OUT/gt_density_maps/``). Counts are written with 2 decimals, as the release stores them. A PrACo++ run (an
imported one, or a ``praco_multiclass`` run) is written as ``OUT/<MODEL>/multiclass_<MODEL>_<split>1.csv`` with
``density_maps/<img id>_<class>.npy`` when the run kept them.

Example:
    countboard export-praco 3f2a... 9b1c... --out benchmark_results --store mlruns
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.counting.released.layout import PracoResults, write_results
from countboard.counting.released.multiclass import write_mc_results
from countboard.errors import ConfigError
from countboard.tracking import tags as tg
from countboard.tracking.tags import RunTags

_META = ("image_id", "class_name", "gt")


def _read_table(tracker, run_id: str, name: str, tmp: Path) -> pd.DataFrame | None:
    if f"tables/{name}.parquet" not in tracker.list_artifacts(run_id, "tables"):
        return None
    return pd.read_parquet(tracker.download(run_id, f"tables/{name}.parquet", tmp))


def _read_maps(tracker, run_id: str, tmp: Path) -> dict[str, np.ndarray]:
    if "arrays/density_maps.npz" not in tracker.list_artifacts(run_id, "arrays"):
        return {}
    with np.load(tracker.download(run_id, "arrays/density_maps.npz", tmp), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def collect(tracker, run_ids: list[str]) -> tuple[dict[str, pd.DataFrame], dict[str, np.ndarray], RunTags]:
    """Count tables, density maps and the model and split of the runs (a later run's table replaces an earlier
    one's; runs of two models or splits are refused)."""
    tables: dict[str, pd.DataFrame] = {}
    maps: dict[str, np.ndarray] = {}
    seen: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, run_id in enumerate(run_ids):
            try:
                run = tracker.client.get_run(run_id)
            except Exception as exc:  # MLflow raises its own error types for an unknown id
                raise ConfigError(f"run {run_id!r} is not in the store {tracker.uri} ({type(exc).__name__}); "
                                  "give the id of a PrACo run (see `countboard mlflow-ui`)") from exc
            identity = RunTags.from_tags(run.data.tags)
            for key, value in ((tg.MODEL, identity.model), (tg.SPLIT, identity.split)):
                if value and seen.setdefault(key, value) != value:
                    raise ConfigError(f"run {run_id} has {key}={value!r} but an earlier run has {seen[key]!r}; "
                                      "export the runs of one counter on one split together")
            for name in ("negative_counts", "mosaic_upper", "mosaic_lower", "mosaic_pairs", "multiclass_counts"):
                table = _read_table(tracker, run_id, name, Path(tmp) / str(k))
                if table is not None:
                    tables[name] = table
            maps.update(_read_maps(tracker, run_id, Path(tmp) / f"m{k}"))
    if not tables:
        raise ConfigError(f"runs {', '.join(run_ids)} hold no PrACo count tables (tables/negative_counts.parquet, "
                          "mosaic_upper.parquet or multiclass_counts.parquet); give praco_negative, praco_mosaic, "
                          "praco_multiclass or import-praco runs")
    if "multiclass_counts" in tables and len(tables) > 1:
        raise ConfigError(f"runs {', '.join(run_ids)} mix PrACo++ (multi-class) and PrACo results; export them "
                          "apart")
    return tables, maps, RunTags(model=seen.get(tg.MODEL), split=seen.get(tg.SPLIT))


def build_results(tables: dict[str, pd.DataFrame], model: str, split: str) -> PracoResults:
    """The released grid (images x classes) from the project's count tables."""
    neg, up, low = (tables.get(n) for n in ("negative_counts", "mosaic_upper", "mosaic_lower"))
    classes: list[str] = []
    images: list[str] = []
    for table in (neg, up):
        if table is not None:
            classes += [c for c in table.columns if c not in _META and c not in classes]
            images += [i for i in table["image_id"].astype(str) if i not in images]
    class_of, gt = {}, {}
    if neg is not None:
        class_of.update(zip(neg["image_id"].astype(str), neg["class_name"], strict=True))
        gt.update(zip(neg["image_id"].astype(str), neg["gt"], strict=True))
    pairs = tables.get("mosaic_pairs")
    if pairs is not None:
        class_of.update(zip(pairs["image_id"].astype(str), pairs["class_name"], strict=True))
    if up is not None:
        gt.update(zip(up["image_id"].astype(str), up["gt"], strict=True))

    def grid(table: pd.DataFrame | None) -> np.ndarray:
        if table is None:
            return np.full((len(images), len(classes)), np.nan)
        frame = table.assign(image_id=table["image_id"].astype(str)).set_index("image_id")
        return frame.reindex(index=images, columns=classes).to_numpy(np.float64)

    partners = np.full((len(images), len(classes)), None, dtype=object)
    if pairs is not None:
        row, col = {i: k for k, i in enumerate(images)}, {c: k for k, c in enumerate(classes)}
        for image_id, other, partner in pairs[["image_id", "other_class", "partner_id"]].itertuples(index=False):
            if partner is not None and not (isinstance(partner, float) and np.isnan(partner)):
                partners[row[str(image_id)], col[other]] = partner
    pos = np.array([classes.index(class_of[i]) if i in class_of else -1 for i in images])
    return PracoResults(model=model, split=split, images=images, classes=classes,
                        gt=np.array([gt.get(i, np.nan) for i in images], np.float64), pos_idx=pos,
                        counts=grid(neg), upper=grid(up), lower=grid(low), partners=partners)


def export_praco(tracker, run_ids: list[str], out_dir: str | Path, model: str | None = None,
                 split: str | None = None, gt_dir: str | Path | None = None) -> Path:
    """Write the runs' results under ``out_dir/<model>/``; returns that folder."""
    tables, maps, tags = collect(tracker, run_ids)
    model = model or tags.model
    if not model:
        raise ConfigError(f"the runs have no `{tg.MODEL}` tag: pass --model NAME")
    split = split or tags.split or "test"
    pred = {k: v for k, v in maps.items() if not k.startswith("gt:")}
    gt_maps = {k[3:]: v for k, v in maps.items() if k.startswith("gt:")}
    if "multiclass_counts" in tables:
        counts = tables["multiclass_counts"]
        classes = [c for c in counts.columns if c != "image_id"]
        return write_mc_results(out_dir, model, split, counts["image_id"].astype(str).tolist(), classes,
                                counts[classes].to_numpy(np.float64), pred or None, gt_maps or None, gt_dir)
    res = build_results(tables, model, split)
    return write_results(out_dir, res, pred or None, gt_maps or None, gt_dir)
