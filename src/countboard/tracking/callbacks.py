"""Hydra callback that gives every multirun one parent MLflow run, shared by jobs in any process."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from countboard.tracking import store as st

log = logging.getLogger("countboard")
PARENT_ENV = "COUNTBOARD_PARENT_RUN_ID"
PARENT_FILE = ".countboard_parent_run"
#: The multirun of this process whose parent run is open (between on_multirun_start and on_multirun_end).
_open_sweep: SweepCallback | None = None
_OPERATIONAL_PREFIXES = ("tracking", "force", "device", "batch_size", "checkpoint_every", "progress", "hydra",
                         "data_dir")


def sweep_hash(overrides: list[str]) -> str:
    """Identity of a multirun: its command-line overrides without the operational ones."""
    kept = sorted(o for o in overrides if not o.lstrip("+~").startswith(_OPERATIONAL_PREFIXES))
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:16]


class SweepCallback(Callback):
    """Creates (or reuses, on a rerun of the same sweep) the parent run, and closes it at the end."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.tracker = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from countboard.tracking.store import tracker_from_config

        self.tracker = tracker_from_config(config.tracking)
        self.tracker.check()
        exp_id = self.tracker.experiment_id(config.tracking.experiment)
        overrides = list(config.hydra.overrides.task)
        sweep_params = config.hydra.sweeper.get("params") or {}
        overrides += [f"{k}={v}" for k, v in sweep_params.items()]
        for i, grid in enumerate(config.hydra.sweeper.get("grids") or []):
            overrides += [f"grid{i}:{k}={v}" for k, v in grid.items()]
        key = sweep_hash(overrides)
        existing = self.tracker.find_runs(exp_id, {"countboard.role": "sweep", "sweep_hash": key})
        if existing:
            self.run_id = existing[0].run_id
            self.tracker.set_status(self.run_id, st.RUNNING)
        else:
            name = "sweep " + " ".join(sorted(o for o in overrides if "tracking" not in o))[:200]
            self.run_id = self.tracker.create_run(exp_id, name, {
                "countboard.role": "sweep", "sweep_hash": key, "overrides": " ".join(overrides)[:5000]})
        os.environ[PARENT_ENV] = self.run_id
        global _open_sweep
        _open_sweep = self
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / PARENT_FILE).write_text(self.run_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _open_sweep
        _open_sweep = None
        if self.tracker is None or self.run_id is None:
            return
        children = self.tracker.find_runs(self.tracker.experiment_id(config.tracking.experiment),
                                          {st.PARENT_TAG: self.run_id})
        statuses = [c.status for c in children]
        ok = all(s == st.FINISHED for s in statuses)
        self.tracker.set_tags(self.run_id, {"n_children": len(children),
                                            "n_failed_children": sum(s != st.FINISHED for s in statuses)})
        self.tracker.set_status(self.run_id, st.FINISHED if ok else st.FAILED)
        log.info("sweep run %s: %d cells, %d not finished", self.run_id, len(children),
                 sum(s != st.FINISHED for s in statuses))


def fail_open_sweep(error: BaseException | None) -> str | None:
    """End the parent run of a multirun that stopped on an error (a launcher that could not submit, SLURM jobs
    cancelled or lost) as FAILED, with the error in its ``error`` tag; the id of that run, None if none was open.

    Hydra calls no callback when the launcher raises, so ``countboard-sweep`` calls this on its way out.
    """
    global _open_sweep
    sweep, _open_sweep = _open_sweep, None
    if sweep is None or sweep.tracker is None or sweep.run_id is None:
        return None
    message = f"{type(error).__name__}: {error}" if error is not None else "the sweep stopped before its end"
    try:
        sweep.tracker.set_tags(sweep.run_id, {"error": message[:5000]})
        sweep.tracker.set_status(sweep.run_id, st.KILLED if isinstance(error, KeyboardInterrupt) else st.FAILED)
    except Exception as exc:  # the store is gone too: say so, the original error matters more
        log.error("could not mark sweep run %s failed: %s", sweep.run_id, exc)
        return None
    log.error("sweep run %s ended FAILED: %s", sweep.run_id, message[:1000])
    return sweep.run_id


def parent_run_for_job(tracker) -> str | None:
    """The parent run id of the current multirun job, or None for a single run."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        if str(hc.mode) not in ("RunMode.MULTIRUN", "MULTIRUN"):
            return None
        path = Path(hc.sweep.dir) / PARENT_FILE
        if path.exists():
            return path.read_text().strip()
    except ValueError:  # HydraConfig not set: called outside a Hydra app
        return None
    return os.environ.get(PARENT_ENV)
