"""Generated MLflow stores that follow the run conventions, for the index tests and the index benchmark.

A store holds one parent sweep run per family and one child run per model × dataset (× repeat), each tagged as the
engine tags its runs, with params, metrics (values drawn from a per-model skill so that rankings are stable) and,
optionally, the Parquet and PNG artifacts the leaderboard pages read. Everything is seeded.

Example:
    >>> spec = FamilySpec("counters", {"cnt_f1": True, "mae": False}, models=["a", "b"], datasets=["fsc"])
    >>> store = make_store(tmp_path, [spec], seed=0)  # doctest: +SKIP
    >>> len(store.run_ids)  # doctest: +SKIP
    2
"""

from __future__ import annotations

import functools
import io
import json
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

DEFAULT_KINDS = {"counters": "counter", "generators": "generator", "acs": "generator", "grounding": "vlm"}


@dataclass
class FamilySpec:
    """Runs to generate for one family: ``metrics`` maps a key to higher_is_better (None: neither)."""

    family: str
    metrics: dict[str, bool | None]
    models: list[str]
    datasets: list[str]
    splits: list[str] = field(default_factory=lambda: ["test"])
    task: str = ""
    model_kind: str = ""
    evaluators: list[str] = field(default_factory=list)


@dataclass
class SyntheticStore:
    uri: str
    store_dir: Path
    experiment_id: str
    run_ids: list[str]
    sweep_run_ids: list[str]
    values: pd.DataFrame  # one row per child run: run_id, family, model, dataset, split, evaluator + metrics


def local_store(store_dir: Path) -> tuple[str, str]:
    """The SQLite URI and artifact root of a store directory, as the engine lays them out.

    A new store starts as a copy of an empty, already migrated database (made once per process): creating the
    MLflow tables from scratch takes several seconds.
    """
    store_dir = Path(store_dir).resolve()
    store_dir.mkdir(parents=True, exist_ok=True)
    db = store_dir / "mlflow.db"
    if not db.exists():
        shutil.copyfile(_blank_database(), db)
    return f"sqlite:///{db}", (store_dir / "artifacts").as_uri()


@functools.cache
def _blank_database() -> Path:
    from mlflow.tracking import MlflowClient

    db = Path(tempfile.mkdtemp(prefix="countboard-blank-store-")) / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments(max_results=1)
    return db


def specs_from_schema(models_per_family: int = 3, datasets: tuple[str, ...] = ("synthetic",)) -> list[FamilySpec]:
    """One spec per family declared in ``countboard.schema`` (engine excluded), with all its metrics."""
    from countboard.schema import load_schema

    schema = load_schema()
    specs = []
    for fam in schema.families.values():
        if fam.key == "engine":
            continue
        metrics = {m.key: m.higher_is_better for m in schema.family_metrics(fam.key)}
        kind = fam.model_kinds[0] if fam.model_kinds else DEFAULT_KINDS.get(fam.key, "counter")
        specs.append(FamilySpec(fam.key, metrics, [f"{fam.key}_model_{i}" for i in range(models_per_family)],
                                list(datasets), task=f"{fam.key}_task", model_kind=kind,
                                evaluators=["eval_a", "eval_b"] if "eval" in fam.key or fam.key == "acs" else []))
    return specs


def _metric_value(rng: np.random.Generator, skill: float, higher: bool | None, key: str) -> float:
    base = float(np.clip(skill + rng.normal(0, 0.01), 0.0, 1.0))
    if key.endswith(("_low", "_lo")):  # interval bounds straddle the skill, whatever their direction
        return max(base - 0.08, 0.0)
    if key.endswith(("_high", "_hi")):
        return min(base + 0.08, 1.0)
    if higher is None:
        return float(rng.integers(10, 500))
    return base if higher else round((1.0 - base) * 20.0, 6)


def _png(rng: np.random.Generator) -> bytes:
    from PIL import Image

    img = Image.fromarray((rng.random((32, 32)) * 255).astype(np.uint8), mode="L")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def family_artifacts(family: str, rng: np.random.Generator, skill: float) -> dict[str, object]:
    """Artifacts shaped like the tasks' outputs: Parquet tables (DataFrames), PNG figures (bytes), arrays (dicts)."""
    n = 40
    truth = rng.integers(1, 11, n)
    if family == "counters":
        classes = [f"class_{i}" for i in range(4)]
        image_class = rng.choice(classes, n)
        neg = pd.DataFrame([{"class_name": c, "prompt": p, "image_id": f"img{i}", "gt": int(truth[i]),
                             "count": float(truth[i] if p == c else rng.random() * 3 * (1 - skill))}
                            for i, c in enumerate(image_class) for p in classes])
        c_pos = np.maximum(truth + np.round(rng.normal(0, 3 * (1 - skill), n)), 0)
        pairs = pd.DataFrame({"unit_id": [f"m{i}" for i in range(n)], "image_id": [f"img{i}" for i in range(n)],
                              "gt": truth, "c_pos": c_pos, "c_neg": rng.random(n) * 2, "c_single": truth * 1.0,
                              "drift": np.abs(c_pos - truth) / truth,
                              "figure": [f"{i:02d}" if i < 2 else None for i in range(n)]})
        return {"samples.parquet": pairs[["unit_id", "gt", "c_pos"]], "tables/negative_matrix.parquet": neg,
                "tables/mosaic_pairs.parquet": pairs, "figures/mosaic_00.png": _png(rng),
                "figures/mosaic_01.png": _png(rng)}
    if "generator" in family or family == "acs":
        targets = [[int(t)] for t in rng.integers(1, 6, n)]
        counted = [[float(t[0] if rng.random() < skill else rng.integers(1, 6))] for t in targets]
        samples = pd.DataFrame({"unit_id": [f"g{i}" for i in range(n)],
                                "targets": [json.dumps(t) for t in targets],
                                "evaluator_counts": [json.dumps(c) for c in counted]})
        rate = np.clip(skill + rng.normal(0, 0.05, 3), 0.05, 0.95)
        per_type = pd.DataFrame({"prompt_type": ["numeric_simple", "numeric_sentence", "2-additive"], "n": [n] * 3,
                                 "cc_rate": rate, "bcc_rate": rate, "bcc_low": rate - 0.05, "bcc_high": rate + 0.05})
        draws = {"cells": np.array(["numeric_simple", "all"]),
                 "p": np.clip(rng.normal(skill, 0.03, (2, 200)), 0, 1)}
        out = {"samples.parquet": samples, "tables/per_prompt_type.parquet": per_type, "arrays/bcc_draws.npz": draws}
        if "autoeval" in family:
            out.update(annotation_artifacts(rng, targets))
        return out
    if family == "grounding":
        samples = pd.DataFrame({"unit_id": [f"u{i}" for i in range(n)], "iou_soft": rng.beta(1 + 5 * skill, 3, n),
                                "io_ratio": rng.beta(1 + 5 * skill, 2, n), "pg_hit": (rng.random(n) < skill).astype(int)})
        edges = np.linspace(0, 1, 11)
        hist = pd.DataFrame([{"metric": k, "bin_lo": edges[i], "bin_hi": edges[i + 1], "count": int(c)}
                             for k in ("iou_soft", "io_ratio")
                             for i, c in enumerate(np.histogram(samples[k], bins=edges)[0])])
        return {"samples.parquet": samples, "tables/grounding_histograms.parquet": hist}
    return {}


def annotation_artifacts(rng: np.random.Generator, targets: list[list[int]], n: int = 3) -> dict[str, object]:
    """The annotation sample of a ``geckonum_autoeval`` run: its table and a zip of ``<image_id>.png``."""
    rows, buf = [], io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i, t in enumerate(targets[:n]):
            image_id = f"geckonum_{i}_0"
            zf.writestr(f"{image_id}.png", _png(rng))
            rows.append({"image_id": image_id, "prompt_id": i, "seed": 0, "prompt": f"{t[0]} red circles",
                         "prompt_type": "numeric_simple", "nouns": json.dumps(["red circle"]),
                         "questions": json.dumps(["How many red circles are in the image?"])})
    return {"tables/annotation_sample.parquet": pd.DataFrame(rows), "files/annotation_images.zip": buf.getvalue()}


def _log_artifacts(client, run_id: str, artifacts: dict[str, object]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, content in artifacts.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, pd.DataFrame):
                content.to_parquet(path, index=False)
            elif isinstance(content, dict):
                np.savez(path, **content)
            else:
                path.write_bytes(content)
        client.log_artifacts(run_id, str(root))


def make_store(store_dir: str | Path, specs: list[FamilySpec], *, seed: int = 0, repeats: int = 1,
               with_artifacts: bool = True, extra_metrics: int = 0, history_steps: int = 1,
               experiment: str = "countboard") -> SyntheticStore:
    """Write a store under ``store_dir`` (SQLite ``mlflow.db`` + ``artifacts/``) and say what is in it.

    ``extra_metrics`` adds keys ``extra_00``… to every run; ``history_steps`` > 1 logs each metric at that many
    steps (the last step holds the value reported in ``values``).
    """
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    uri, artifact_root = local_store(Path(store_dir))
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment, f"{artifact_root}/{experiment}")
    rng = np.random.default_rng(seed)
    run_ids, sweeps, rows = [], [], []
    for spec in specs:
        parent = client.create_run(exp_id, run_name=f"sweep-{spec.family}", tags={"countboard.role": "sweep"})
        sweeps.append(parent.info.run_id)
        skills = {m: float(s) for m, s in zip(spec.models, np.linspace(0.9, 0.3, len(spec.models)), strict=True)}
        for model, dataset, split, evaluator, rep in (
                (m, d, s, e, r) for m in spec.models for d in spec.datasets for s in spec.splits
                for e in (spec.evaluators or [None]) for r in range(repeats)):
            skill = skills[model] - (0.05 * spec.evaluators.index(evaluator) if evaluator else 0.0)
            tags = {"model": model, "dataset": dataset, "split": split, "task": spec.task or spec.family,
                    "model_kind": spec.model_kind or DEFAULT_KINDS.get(spec.family, "counter"),
                    "family": spec.family,  # a cell's identity includes its task, as a real config_hash does
                    "config_hash": f"{model}-{dataset}-{split}-{evaluator}-{spec.task or spec.family}-{rep}",
                    "git_commit": "0" * 40, "countboard_version": "0.1.0", "device": "cpu",
                    "mlflow.parentRunId": parent.info.run_id}
            if evaluator:
                tags["evaluator"] = evaluator
            run = client.create_run(exp_id, run_name=f"{model}-{dataset}-{split}", tags=tags)
            values = {k: _metric_value(rng, skill, h, k) for k, h in spec.metrics.items()}
            values.update({f"extra_{i:02d}": float(rng.random()) for i in range(extra_metrics)})
            now = int(time.time() * 1000)
            metrics = [Metric(k, v * (s + 1) / history_steps, now + s, s)
                       for k, v in values.items() for s in range(history_steps)]
            params = [Param("model.name", model), Param("dataset.name", dataset), Param("dataset.split", split),
                      Param("seed", str(seed)), Param("batch_size", "8")]
            for i in range(0, len(metrics), 1000):
                client.log_batch(run.info.run_id, metrics=metrics[i:i + 1000],
                                 params=params if i == 0 else [], tags=[RunTag("device", "cpu")])
            if with_artifacts:
                _log_artifacts(client, run.info.run_id, family_artifacts(spec.family, rng, skill))
            client.set_terminated(run.info.run_id, "FINISHED")
            run_ids.append(run.info.run_id)
            rows.append({"run_id": run.info.run_id, "family": spec.family, "model": model, "dataset": dataset,
                         "split": split, "evaluator": evaluator, **values})
        client.set_terminated(parent.info.run_id, "FINISHED")
    return SyntheticStore(uri, Path(store_dir).resolve(), exp_id, run_ids, sweeps, pd.DataFrame(rows))
