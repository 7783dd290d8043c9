"""One sweep cell = one MLflow run: compose → skip or resume → checkpointed units → summary → artifacts.

``run_job(cfg)`` is what ``countboard-sweep`` calls for every job, in whatever process the launcher uses.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

import countboard
from countboard.errors import ConfigError, CountboardError
from countboard.results import RunContext, Task, TaskResult
from countboard.schema import load_schema
from countboard.tracking import Tracker, tracker_from_config
from countboard.tracking import store as st
from countboard.tracking.artifacts import write_result
from countboard.tracking.callbacks import parent_run_for_job

log = logging.getLogger("countboard")

#: Keys that change how a cell runs, not what it computes: left out of ``config_hash``.
OPERATIONAL_KEYS = ("tracking", "force", "device", "batch_size", "checkpoint_every", "progress", "data_dir")
META_KEYS = ("name", "kind", "display_name", "description")
CHECKPOINT_DIR = "checkpoints"


def config_hash(cfg: DictConfig) -> str:
    """Hash of what a cell computes: the unresolved config without ``OPERATIONAL_KEYS``.

    Unresolved, so ``${data_dir}`` paths hash the same on every machine.
    """
    container = OmegaConf.to_container(cfg, resolve=False)
    semantic = {k: v for k, v in container.items() if k not in OPERATIONAL_KEYS and k != "hydra"}
    blob = json.dumps(semantic, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}``; lists become their JSON text."""
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list):
        out[prefix[:-1]] = json.dumps(d, default=str)
    else:
        out[prefix[:-1]] = d
    return out


def resolve_device(requested: str) -> str:
    import torch

    requested = str(getattr(requested, "value", requested))
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but torch sees no CUDA device; use device=auto or device=cpu")
    return requested


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(countboard.__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _node_meta(cfg: DictConfig, group: str) -> dict[str, Any]:
    node = cfg.get(group)
    if node is None or "_target_" not in node or "name" not in node:
        raise ConfigError(f"config group `{group}` must select an option whose node has `_target_` and `name`")
    return {k: node.get(k) for k in META_KEYS if k in node}


def check_node(cfg: DictConfig, group: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword arguments of ``cfg[group]`` (metadata removed), checked against its ``_target_``'s signature."""
    import inspect

    from hydra.utils import get_class

    node = OmegaConf.to_container(cfg[group], resolve=True)
    for k in META_KEYS:
        node.pop(k, None)
    try:
        cls = get_class(node["_target_"])
    except Exception as exc:
        raise ConfigError(f"{group}._target_={node['_target_']!r} cannot be imported: {exc}") from exc
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        valid = sorted(p for p in params if p != "self")
        unknown = sorted(set(node) - {"_target_", "_partial_", "_recursive_", "_convert_"} - set(valid))
        if unknown:
            raise ConfigError(f"{group}.{unknown[0]} is not a parameter of {node['_target_']}; "
                              f"valid keys: {', '.join(k for k in valid if k not in extra)}")
        missing = [p.name for p in params.values() if p.name != "self" and p.default is inspect.Parameter.empty
                   and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in node
                   and p.name not in extra]
        if missing:
            raise ConfigError(f"{group} needs `{missing[0]}` for {node['_target_']}: add {group}.{missing[0]}=…")
    return node


def instantiate_node(cfg: DictConfig, group: str, **extra: Any) -> Any:
    """``hydra.utils.instantiate`` of ``cfg[group]`` without its metadata keys, with a clear error on bad keys."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(check_node(cfg, group, tuple(extra)), **extra, _convert_="all")
    except InstantiationException as exc:  # surface our own message, not Hydra's wrapper text
        cause = exc.__cause__
        if isinstance(cause, CountboardError):
            raise cause from None
        raise


class Cell:
    """The state of one job: config, identity, tracker and the run it writes to."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.model_meta = _node_meta(cfg, "model")
        self.dataset_meta = _node_meta(cfg, "dataset")
        self.task_meta = _node_meta(cfg, "task")
        self.name = f"model={self.model_meta['name']},dataset={self.dataset_meta['name']},task={self.task_meta['name']}"
        self.hash = config_hash(cfg)
        self.device = resolve_device(cfg.device)
        self.tracker: Tracker = tracker_from_config(cfg.tracking)
        self.tracker.check()
        self.experiment_id = self.tracker.experiment_id(cfg.tracking.experiment)
        self.run_id: str | None = None

    def tags(self, family: str) -> dict[str, str]:
        return {
            "model": self.model_meta["name"], "dataset": self.dataset_meta["name"], "task": self.task_meta["name"],
            "model_kind": self.model_meta.get("kind", "unknown"), "family": family, "config_hash": self.hash,
            "git_commit": git_commit(), "countboard_version": countboard.__version__, "device": self.device,
            "host": socket.gethostname(), "countboard.role": "cell",
        }

    def open_run(self, family: str) -> bool:
        """Find or create the run. Returns False when a finished run exists and ``force`` is off."""
        runs = self.tracker.find_runs(self.experiment_id, {"config_hash": self.hash})
        finished = [r for r in runs if r.status == st.FINISHED]
        if finished and not self.cfg.force:
            log.info("skip %s: finished run %s has config_hash %s (force=true reruns it)",
                     self.name, finished[0].run_id, self.hash)
            return False
        resumable = [r for r in runs if r.status in (st.RUNNING, st.FAILED, st.KILLED)]
        if resumable and not self.cfg.force:
            self.run_id = resumable[0].run_id
            log.info("resume %s in run %s (status was %s)", self.name, self.run_id, resumable[0].status)
            self.tracker.set_status(self.run_id, st.RUNNING)
            self.tracker.set_tags(self.run_id, {"device": self.device, "error": ""})
            return True
        parent = parent_run_for_job(self.tracker)
        self.run_id = self.tracker.create_run(self.experiment_id, self.name, self.tags(family), parent)
        resolved = OmegaConf.to_container(self.cfg, resolve=True)
        self.tracker.log_params(self.run_id, flatten(resolved))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.yaml"
            path.write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
            self.tracker.log_file(self.run_id, path)
        return True


def _load_checkpoints(tracker: Tracker, run_id: str) -> tuple[list[pd.DataFrame], int]:
    """Records of earlier attempts of this run, and the number of parts already written."""
    parts = sorted(p for p in tracker.list_artifacts(run_id, CHECKPOINT_DIR) if p.endswith(".parquet"))
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in parts:
            frames.append(pd.read_parquet(tracker.download(run_id, p, tmp)))
    return frames, len(parts)


def _split_records(frames: Sequence[pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Latest record per unit; successful ones and failures apart."""
    if not frames:
        return pd.DataFrame(columns=["unit_id"]), pd.DataFrame(columns=["unit_id", "error"])
    df = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else frames[0]
    df = df.drop_duplicates("unit_id", keep="last")
    if "error" not in df:
        return df.reset_index(drop=True), pd.DataFrame(columns=["unit_id", "error"])
    failed = df["error"].notna() & (df["error"].astype(str) != "")
    ok = df[~failed].drop(columns=["error"]).dropna(axis=1, how="all")
    return ok.reset_index(drop=True), df.loc[failed, ["unit_id", "error"]].reset_index(drop=True)


def _write_part(tracker: Tracker, run_id: str, index: int, records: list[dict]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"part-{index:05d}.parquet"
        pd.DataFrame.from_records(records).to_parquet(path, index=False)
        tracker.log_file(run_id, path, CHECKPOINT_DIR)


def compute_units(task: Task, model: Any, dataset: Any, ctx: RunContext, cell: Cell, every: int
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Evaluate every unit without a checkpointed successful record; checkpoint every ``every`` units."""
    frames, n_parts = _load_checkpoints(cell.tracker, cell.run_id)
    ok, _ = _split_records(frames)
    done = set(ok["unit_id"].astype(str)) if len(ok) else set()
    units = [str(u) for u in task.units(model, dataset, ctx)]
    if ctx.max_samples is not None:
        units = units[: ctx.max_samples]
    todo = [u for u in units if u not in done]
    if done:
        log.info("%s: %d of %d units restored from checkpoints", cell.name, len(units) - len(todo), len(units))
    bar = tqdm(total=len(units), initial=len(units) - len(todo), desc=cell.name, disable=not ctx.progress,
               unit="unit", leave=False)
    for start in range(0, len(todo), every):
        chunk = todo[start:start + every]
        records = task.run_units(model, dataset, chunk, ctx)
        _check_records(records, chunk, task)
        _write_part(cell.tracker, cell.run_id, n_parts, records)
        frames.append(pd.DataFrame.from_records(records))
        n_parts += 1
        bar.update(len(chunk))
    bar.close()
    ok, failed = _split_records(frames)
    keep = set(units)
    return ok[ok["unit_id"].astype(str).isin(keep)].reset_index(drop=True), failed[failed["unit_id"].isin(keep)]


def _check_records(records: list[dict], chunk: list[str], task: Task) -> None:
    got = [str(r.get("unit_id")) for r in records]
    if sorted(got) != sorted(chunk):
        raise RuntimeError(f"task {task.name!r} returned records for {got[:5]}… but was asked for {chunk[:5]}…; "
                           "run_units must return exactly one record per unit id")


def _validate_metrics(metrics: dict[str, float]) -> None:
    schema = load_schema()
    for key in metrics:
        schema.metric(key)


def run_job(cfg: DictConfig) -> str | None:
    """Run one cell. Returns the run id, or None when skipped because it already finished."""
    t0 = time.time()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cell = Cell(cfg)
    task_cls_family = _task_family(cfg)
    if not cell.open_run(task_cls_family):
        return None
    ctx = RunContext(device=cell.device, seed=int(cfg.seed), batch_size=int(cfg.batch_size),
                     work_dir=Path(tempfile.mkdtemp(prefix="countboard-")), progress=bool(cfg.progress),
                     max_samples=cfg.get("max_samples"))
    records = failed = None
    try:
        task: Task = instantiate_node(cfg, "task")
        dataset = instantiate_node(cfg, "dataset")
        model = instantiate_node(cfg, "model", device=cell.device)
        records, failed = compute_units(task, model, dataset, ctx, cell, int(cfg.checkpoint_every))
        result = task.summarize(records, model, dataset, ctx) if len(records) else TaskResult(metrics={})
        metrics = {**result.metrics, "n_samples": len(records), "n_failed_samples": len(failed),
                   "duration_s": time.time() - t0}
        _validate_metrics(metrics)
        write_result(cell.tracker, cell.run_id, result, records, failed)
        cell.tracker.log_metrics(cell.run_id, metrics)
        cell.tracker.set_status(cell.run_id, st.FINISHED)
        if len(failed):
            log.warning("%s: %d units failed; see failures.json in run %s", cell.name, len(failed), cell.run_id)
        log.info("done %s → run %s", cell.name, cell.run_id)
        return cell.run_id
    except BaseException as exc:
        _record_failure(cell, exc, records, failed)
        raise


def _record_failure(cell: Cell, exc: BaseException, records, failed) -> None:
    """Keep what was computed, and say why the run failed."""
    message = f"{type(exc).__name__}: {exc}"
    try:
        cell.tracker.set_tags(cell.run_id, {"error": message})
        cell.tracker.log_json(cell.run_id, {"error": message, "traceback": traceback.format_exc()}, "error.json")
        if failed is not None and len(failed):
            cell.tracker.log_json(cell.run_id, failed.to_dict("records"), "failures.json")
        cell.tracker.set_status(cell.run_id, st.KILLED if isinstance(exc, KeyboardInterrupt) else st.FAILED)
    except Exception:  # the store itself may be what failed
        log.exception("could not record the failure of run %s", cell.run_id)
    log.error("%s failed: %s (run %s keeps its checkpoints; rerun to resume)", cell.name, message, cell.run_id)


def _task_family(cfg: DictConfig) -> str:
    from hydra.utils import get_class

    return getattr(get_class(cfg.task._target_), "family", "") or "other"
