"""Trained checkpoints as MLflow runs: log one, and find the newest one of a model again (locally or on a server).

A checkpoint run is a finished run of the experiment ``countboard-training`` tagged ``model=<name>``,
``countboard.kind=training`` and a ``config_hash`` of its training settings, with the file under ``checkpoint/``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from countboard.tracking import tags as tg
from countboard.tracking.tags import RunTags


def config_hash(info: dict) -> str:
    """Hash of the training and dataset settings (a rerun with the same settings is not logged twice)."""
    key = json.dumps({"config": info["config"], "dataset": info["dataset_config"]}, sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


TRAINING_EXPERIMENT = "countboard-training"


def log_checkpoint(path: Path, model: str, info: dict, store: str, force: bool = False) -> str | None:
    """Log a trained checkpoint as a finished MLflow run tagged ``model=<model>``.

    The run goes to the experiment ``countboard-training`` of ``store`` (a local store directory or a tracking
    URI), with the checkpoint under the artifact folder ``checkpoint/``. Returns the run id, or None when a
    training with the same settings was already logged and ``force`` is false.
    """
    tags = RunTags(model=model, model_kind="counter", config_hash=config_hash(info),
                   extra={tg.KIND: tg.KIND_TRAINING}).to_tags()
    params = {**{f"train.{k}": v for k, v in info["config"].items()}, "dataset_root": info["dataset_root"]}
    metrics = {"final_loss": info["final_loss"], "train_seconds": info["train_seconds"],
               "train_cpu_seconds": info["train_cpu_seconds"],
               "n_train_images": info["n_train_images"]}
    tracker = _tracker(store)
    if not force and _finished_runs(tracker, {tg.CONFIG_HASH: tags[tg.CONFIG_HASH]}):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "checkpoint").mkdir()
        shutil.copy2(path, Path(tmp) / "checkpoint" / f"{model}.pt")
        # force=True: the repeat check above replaces log_complete_run's own, whose status filter the SQLite
        # store rejects ("Only ['run_id'] attributes support comparison with a list").
        return tracker.log_complete_run(TRAINING_EXPERIMENT, f"train {model}", tags,
                                        params=params, metrics=metrics, artifacts_dir=tmp, force=True)


def _finished_runs(tracker, tags: dict[str, str]) -> list:
    """Finished runs of the training experiment with ``tags``, newest first (none if the experiment is missing)."""
    exp = tracker.client.get_experiment_by_name(TRAINING_EXPERIMENT)
    if exp is None:
        return []
    return [r for r in tracker.find_runs(exp.experiment_id, tags) if r.status == "FINISHED"]


def _tracker(store: str):
    from countboard.tracking.store import open_store

    return open_store(store, create=True)


def find_logged_checkpoint(model: str, store: str) -> Path | None:
    """Download the checkpoint of the newest finished training run tagged ``model=<model>`` (None if there is none)."""
    from countboard.tracking.address import parse
    from countboard.tracking.store import open_address

    where = parse(store)
    if where.db is not None and not where.db.is_file():
        return None
    tracker = open_address(where, create=True)
    runs = _finished_runs(tracker, {tg.MODEL: model})
    if not runs:
        return None
    cache = where.cache_dir() / "checkpoint_downloads"
    dst = cache / runs[0].run_id
    target = dst / "checkpoint" / f"{model}.pt"
    if not target.is_file():
        dst.mkdir(parents=True, exist_ok=True)
        tracker.download(runs[0].run_id, "checkpoint", dst)
    return target
