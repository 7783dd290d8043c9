"""One sweep cell: its identity (``config_hash``), its owner (a lease) and the MLflow run it writes to.

``Cell.claim`` takes the cell's lease before anything about its runs is decided, so that two processes never
resume, create or end the same run; ``Cell.open_run`` then skips, resumes or creates the run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import countboard
from countboard.config import (
    HASH_DEFAULTS,
    META_KEYS,
    MODEL_FEEDING_KEYS,
    OPERATIONAL_KEYS,
    REPLICATE_KEYS,
    RESOLVER_PREFIX,
    clean_run_name,
)
from countboard.errors import ConfigError
from countboard.protocol import DEFAULT_LABEL, Protocol, derive
from countboard.tracking import Tracker, failpoints, tracker_from_config
from countboard.tracking import store as st
from countboard.tracking import tags as tg
from countboard.tracking.callbacks import parent_run_for_job
from countboard.tracking.datasets import DatasetRef
from countboard.tracking.lease import Lease, owner_tags
from countboard.tracking.tags import RunTags

log = logging.getLogger("countboard")

DATA_KEY = "__data_fingerprint__"


def config_hash(cfg: DictConfig, data_fingerprint: str | None = None, drop: tuple[str, ...] = ()) -> str:
    """Hash of what a cell computes: the unresolved config without ``OPERATIONAL_KEYS`` (nor the model's
    ``MODEL_FEEDING_KEYS``), plus the data's identity.

    Unresolved, so ``${data_dir}`` paths hash the same on every machine; the data itself enters through
    ``data_fingerprint`` (``countboard.fingerprint``). ``drop`` leaves out more keys (``seed`` for the
    replicate group). A key of ``HASH_DEFAULTS`` at its default value is left out too (``precision=fp32``).
    """
    container = _derived_as_values(cfg, OmegaConf.to_container(cfg, resolve=False))
    semantic = {k: v for k, v in container.items() if k not in OPERATIONAL_KEYS and k not in drop
                and not (k in HASH_DEFAULTS and str(v) == HASH_DEFAULTS[k])}
    if isinstance(semantic.get("model"), dict):
        semantic["model"] = {k: v for k, v in semantic["model"].items() if k not in MODEL_FEEDING_KEYS}
    if isinstance(semantic.get("dataset"), dict) and "kind" in semantic["dataset"]:
        # what kind of data it is (``countboard.fit``), declared after cells existed: not which data it is
        semantic["dataset"] = {k: v for k, v in semantic["dataset"].items() if k != "kind"}
    if data_fingerprint:
        semantic[DATA_KEY] = data_fingerprint
    blob = json.dumps(semantic, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _derived_as_values(cfg: DictConfig, node: Any, path: str = "") -> Any:
    """``node`` with every value derived by a project resolver (``${cb.…}``, ``config.RESOLVER_PREFIX``) replaced by
    what it resolves to: a key that became derived hashes as the value it had when it was written out."""
    if isinstance(node, dict):
        return {k: _derived_as_values(cfg, v, f"{path}{k}.") for k, v in node.items()}
    if isinstance(node, str) and node.startswith("${" + RESOLVER_PREFIX):
        return OmegaConf.select(cfg, path[:-1])
    return node


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


#: Device files of a GPU driver (NVIDIA, ROCm, WSL): without any of them torch cannot see a CUDA device.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def gpu_driver_present() -> bool:
    """False on a Linux machine without a GPU driver's device files, where ``device=auto`` is ``cpu`` without
    importing torch (seconds per job that a model without torch need not pay); True elsewhere (torch decides)."""
    return not sys.platform.startswith("linux") or any(os.path.exists(p) for p in GPU_DEVICE_FILES)


def resolve_device(requested: str) -> str:
    requested = str(getattr(requested, "value", requested))
    if requested == "cpu" or (requested == "auto" and not gpu_driver_present()):
        return "cpu"
    import torch

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


def node_meta(cfg: DictConfig, group: str) -> dict[str, Any]:
    node = cfg.get(group)
    if node is None or "_target_" not in node or "name" not in node:
        raise ConfigError(f"config group `{group}` must select an option whose node has `_target_` and `name`")
    return {k: node.get(k) for k in META_KEYS if k in node}


def run_name(cfg: DictConfig, model: str, dataset: str, task: str, protocol: Protocol | None = None) -> str:
    """Short, distinct run name: ``owlv2 · fsc147 · praco_negative`` (+ the protocol unless it is the default,
    seed and subset when they differ): ``class_blind · fsc147 · praco_mosaic · mosaic=official``."""
    parts = [model, dataset, task]
    if protocol is not None and protocol.label != DEFAULT_LABEL:
        parts.append(protocol.label)
    if int(cfg.get("seed", 0)):
        parts.append(f"seed {cfg.seed}")
    if cfg.get("max_samples") is not None:
        parts.append(f"first {cfg.max_samples}")
    return clean_run_name(" · ".join(str(p) for p in parts))


def task_family(cfg: DictConfig) -> str:
    """The family of the cell's task (its class's ``family``; ``other`` when it declares none)."""
    from hydra.utils import get_class

    return getattr(get_class(cfg.task._target_), "family", "") or "other"


class Cell:
    """The state of one job: config, identity, tracker, lease and the run it writes to."""

    def __init__(self, cfg: DictConfig, tracker: Tracker | None = None, data_fingerprint: str | None = None):
        self.cfg = cfg
        self.model_meta = node_meta(cfg, "model")
        self.dataset_meta = node_meta(cfg, "dataset")
        self.task_meta = node_meta(cfg, "task")
        self.protocol = derive(flatten(OmegaConf.to_container(cfg, resolve=True)))
        self.name = run_name(cfg, self.model_meta["name"], self.dataset_meta["name"], self.task_meta["name"],
                             self.protocol)
        self.data_fingerprint = data_fingerprint
        self.hash = config_hash(cfg, data_fingerprint)
        self.replicate_hash = config_hash(cfg, data_fingerprint, drop=REPLICATE_KEYS)  # subsets stay apart
        self.device = resolve_device(cfg.device)
        if tracker is None:
            tracker = tracker_from_config(cfg.tracking)
            tracker.check()
        self.tracker: Tracker = tracker
        self.family = task_family(cfg)
        # new runs go to the family's experiment; runs of the cell are looked for in every experiment of the
        # pattern and in the one experiment of older stores (``tracking.experiments``)
        self.experiment_id = self.tracker.family_experiment_id(cfg.tracking.experiment, self.family)
        self.search_ids = self.tracker.search_experiment_ids(cfg.tracking.experiment, self.experiment_id)
        self.run_id: str | None = None
        self.lease: Lease | None = None
        self.finished = False

    def tags(self, family: str) -> dict[str, str]:
        return RunTags(
            role=tg.ROLE_CELL, model=self.model_meta["name"], dataset=self.dataset_meta["name"],
            task=self.task_meta["name"], model_kind=self.model_meta.get("kind", "unknown"), family=family,
            config_hash=self.hash, replicate_hash=self.replicate_hash, seed=self.cfg.get("seed", 0),
            data_fingerprint=self.data_fingerprint or "", git_commit=git_commit(),
            countboard_version=countboard.__version__, device=self.device,
            precision=str(self.cfg.get("precision", "fp32")), host=socket.gethostname(),
            gpu=os.environ.get("CUDA_VISIBLE_DEVICES", ""), protocol=self.protocol.key,
            protocol_label=self.protocol.label, extra=tg.library_versions(),
        ).to_tags()

    def claim(self) -> bool:
        """Take the cell's lease; False (with one line) when another live process owns it and on_busy=skip."""
        self.lease = Lease(self.tracker, self.experiment_id, self.hash, float(self.cfg.get("lease_ttl_s", 60)))
        if self.lease.acquire():
            return True
        holder = self.lease.holder
        who = holder.owner() if holder else "another process"
        if str(self.cfg.get("on_busy", "skip")) == "wait":
            log.info("wait %s: owned by %s; waiting for its lease to end", self.name, who)
            return self.lease.wait()
        log.info("busy %s: owned by %s (config_hash %s); skipped (on_busy=wait waits for it)", self.name, who,
                 self.hash)
        self.lease = None
        return False

    def release(self) -> None:
        if self.lease is not None:
            self.lease.release()

    def _reopen(self, run: st.RunRecord, why: str) -> None:
        self.run_id = run.run_id
        log.info("%s %s in run %s (status was %s)", why, self.name, self.run_id, run.status)
        self.tracker.set_status(self.run_id, st.RUNNING)
        # a run made before protocols were tagged gets its tag when it is resumed
        self.tracker.set_tags(self.run_id, {tg.DEVICE: self.device, tg.GPU: os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                                            tg.ERROR: "", tg.PROTOCOL: self.protocol.key,
                                            tg.PROTOCOL_LABEL: self.protocol.label, **owner_tags()})
        self.log_config()  # a run killed before its params were logged gets them now

    def open_run(self, family: str) -> bool:
        """Find or create the run (the lease is held). False when a finished run exists and nothing is to redo."""
        runs = [r for r in self.tracker.find_runs(self.search_ids, {tg.CONFIG_HASH: self.hash})
                if r.tags.get(tg.ROLE) == tg.ROLE_CELL]
        finished = [r for r in runs if r.status == st.FINISHED]
        if finished and not self.cfg.force:
            run = finished[0]
            n_failed = int(float(run.tags.get(tg.N_FAILED_UNITS, "0") or 0))
            if n_failed and self.cfg.get("retry_failed", True):
                self._reopen(run, f"retry {n_failed} failed units of")
                return True
            extra = f"; {n_failed} failed units kept (retry_failed=false)" if n_failed else ""
            log.info("skip %s: finished run %s has config_hash %s (force=true reruns it)%s",
                     self.name, run.run_id, self.hash, extra)
            return False
        resumable = [r for r in runs if r.status in (st.RUNNING, st.FAILED, st.KILLED)]
        if resumable and not self.cfg.force:
            self._reopen(resumable[0], "resume")
            return True
        parent = parent_run_for_job(self.tracker)
        self.run_id = self.tracker.create_run(self.experiment_id, self.name,
                                              {**self.tags(family), **owner_tags()}, parent)
        failpoints.hit("log_params")
        self.log_config()
        return True

    def dataset(self) -> DatasetRef:
        """The dataset this cell evaluates, as MLflow tracks datasets (digest: the data fingerprint)."""
        node = OmegaConf.to_container(self.cfg.dataset, resolve=True)
        return DatasetRef.from_config(node, self.data_fingerprint or "")

    def log_config(self) -> None:
        """Params (the flattened resolved config) and ``config.yaml``; what is already logged is kept."""
        resolved = OmegaConf.to_container(self.cfg, resolve=True)
        self.tracker.log_params(self.run_id, flatten(resolved))
        self.tracker.log_datasets(self.run_id, [self.dataset()])  # a resumed run made before datasets gets it now
        if "config.yaml" in self.tracker.list_artifacts(self.run_id):
            return
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.yaml"
            path.write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
            self.tracker.log_file(self.run_id, path)
