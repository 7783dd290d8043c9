"""Hydra callback that gives every multirun one parent MLflow run, shared by jobs in any process."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from countboard.tracking import store as st
from countboard.tracking import tags as tg
from countboard.tracking.experiments import SWEEPS_GROUP

log = logging.getLogger("countboard")
PARENT_ENV = "COUNTBOARD_PARENT_RUN_ID"
PARENT_FILE = ".countboard_parent_run"
#: The multirun of this process whose parent run is open (between on_multirun_start and on_multirun_end).
_open_sweep: SweepCallback | None = None


def sweep_hash(overrides: list[str]) -> str:
    """Identity of a multirun: its command-line overrides without the operational ones."""
    from countboard.config import OPERATIONAL_KEYS

    prefixes = tuple(OPERATIONAL_KEYS)
    kept = sorted(o for o in overrides if not o.lstrip("+~").split(":", 1)[-1].startswith(prefixes))
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:16]


class SweepError(CompactHydraException):
    """A sweep-level error the user can fix: Hydra prints its one line, without a traceback."""


class SweepRefused(BaseException):
    """A multirun none of whose cells can run, refused before anything is launched or created. A
    ``BaseException``: Hydra turns a callback's ``Exception`` into a warning and launches the jobs anyway;
    ``countboard-sweep`` prints this one line and exits with status 2."""


class SweepCallback(Callback):
    """Creates (or reuses, on a rerun of the same sweep) the parent run, and closes it at the end."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.tracker = None
        self.experiment_id: str | None = None
        self.pattern = ""
        self.ttl_s = 60.0
        self.owner = None  # the parent run's owner record (``lease.OwnerHeartbeat``), renewed while the sweep runs

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from countboard.errors import CountboardError, debug_enabled, user_message, write_error

        if "joblib" in str(config.hydra.launcher.get("_target_", "")):
            from countboard.processes import joblib_workers_die_with_parent

            joblib_workers_die_with_parent()  # no job process outlives the sweep, however it ends

        try:
            check_some_cell_fits(config)
        except CountboardError as exc:
            raise SweepRefused(f"error: {exc}") from None
        try:
            self._start(config)
        except Exception as exc:
            written = write_error(exc, st.config_folder(config.get("tracking")))
            if written is None or debug_enabled():
                message = user_message(exc)
                if message is None or debug_enabled():
                    raise
                raise SweepError(f"error: {message}") from None
            log.info("the sweep's parent run was not created: %s", written)  # every job says so in its own line
        _start_progress(config)

    def _start(self, config: DictConfig) -> None:
        from countboard.config import validate
        from countboard.tracking.lease import Lease, OwnerHeartbeat
        from countboard.tracking.store import tracker_from_config

        validate(config)  # before the parent run exists
        self.tracker = tracker_from_config(config.tracking)
        self.tracker.check()
        # a sweep may span families: its parent lives in the pattern's `sweeps` experiment, its children in their
        # families' experiments (``tracking.experiments``)
        self.pattern = str(config.tracking.experiment)
        exp_id = self.experiment_id = self.tracker.family_experiment_id(self.pattern, group=SWEEPS_GROUP)
        overrides = list(config.hydra.overrides.task)
        sweep_params = config.hydra.sweeper.get("params") or {}
        overrides += [f"{k}={v}" for k, v in sweep_params.items()]
        for i, grid in enumerate(config.hydra.sweeper.get("grids") or []):
            overrides += [f"grid{i}:{k}={v}" for k, v in grid.items()]
        key = sweep_hash(overrides)
        self.ttl_s = float(config.get("lease_ttl_s", 60))
        with Lease(self.tracker, exp_id, f"sweep:{key}", self.ttl_s):
            searched = self.tracker.search_experiment_ids(self.pattern, exp_id)
            existing = self.tracker.find_runs(searched, {tg.ROLE: tg.ROLE_SWEEP, tg.SWEEP_HASH: key})
            if existing:
                self.run_id = existing[0].run_id
                self.tracker.set_status(self.run_id, st.RUNNING)
            else:
                self.run_id = self.tracker.create_run(exp_id, _sweep_name(overrides), {
                    tg.ROLE: tg.ROLE_SWEEP, tg.SWEEP_HASH: key, tg.OVERRIDES: " ".join(overrides)[:5000]})
            self.owner = OwnerHeartbeat(self.tracker, self.run_id, self.ttl_s).start()  # doctor leaves it alone
        atexit.register(self.close)  # a failed cell makes the sweeper raise before on_multirun_end
        os.environ[PARENT_ENV] = self.run_id
        global _open_sweep
        _open_sweep = self
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / PARENT_FILE).write_text(self.run_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from countboard.tracking.progress import finish_progress

        self.close()
        finish_progress()

    def close(self) -> None:
        """End the parent run with its children: FINISHED when all finished, FAILED otherwise (idempotent).

        Children still running in another live process (a second sweep of the same grid) leave it RUNNING: that
        process closes it.
        """
        global _open_sweep
        _open_sweep = None
        self.stop_owning()
        if self.tracker is None or self.run_id is None:
            return
        run_id, self.run_id = self.run_id, None
        try:
            searched = self.tracker.search_experiment_ids(self.pattern)  # children may have made new ones
            status = close_parent(self.tracker, searched, run_id, self.ttl_s)
        except Exception as exc:  # at exit the store may be gone; `countboard doctor --fix` closes it later
            log.warning("sweep run %s not closed: %s", run_id, exc)
            return
        log.info("sweep run %s: %s", run_id, status)

    def stop_owning(self) -> None:
        """Stop renewing the parent run's owner record (idempotent)."""
        if self.owner is not None:
            self.owner.stop()
            self.owner = None


#: Launchers whose jobs run in local processes that write on this process's terminal (their output is relayed).
_LOCAL_LAUNCHERS = ("joblib", "countboard_launcher.gpu_launcher")


def _lanes(launcher: Any, n_cells: int) -> int:
    """How many cells ``launcher`` runs at once: joblib's ``n_jobs`` (``-1``: every core), the local GPU
    launcher's GPUs, a SLURM array's parallelism; 1 for Hydra's basic launcher."""
    for key in ("n_jobs", "array_parallelism"):
        value = launcher.get(key)
        if isinstance(value, int):
            n = value if value > 0 else (os.cpu_count() or 1) + 1 + value
            return max(1, min(n, n_cells))
    gpus = launcher.get("gpus")
    if gpus is not None:
        return max(1, min(len(str(gpus).strip("[]").split(",")), n_cells))
    return 1


def _start_progress(config: DictConfig) -> None:
    """Start the multirun's progress line (``countboard.tracking.progress``) in this, the launching, process."""
    from hydra.core.global_hydra import GlobalHydra

    from countboard.tracking.progress import STATUS_DIR, start_progress

    jobs: list[str] = []
    if GlobalHydra.instance().is_initialized():
        loader = GlobalHydra.instance().config_loader()
        with contextlib.suppress(Exception):  # a grid Hydra cannot expand fails in its own jobs
            jobs = [" ".join(job) for job in sweep_jobs(config.hydra.sweeper, list(config.hydra.overrides.task),
                                                        loader)]
    launcher = config.hydra.launcher
    target = str(launcher.get("_target_", ""))
    start_progress(Path(config.hydra.sweep.dir).resolve() / STATUS_DIR, jobs, _lanes(launcher, len(jobs) or 1),
                   relay=any(name in target for name in _LOCAL_LAUNCHERS))


def sweep_jobs(sweeper: Any, arguments: list[str], config_loader: Any) -> list[list[str]]:
    """The cells of a multirun, each as its list of overrides, in launch order: the union of ``sweeper.grids``
    (``[{}]`` for Hydra's basic sweeper), each expanded with ``sweeper.params`` and the command line's
    ``arguments`` as the basic sweeper expands them (cartesian product; a swept key replaces the grid's values);
    a cell of two grids is launched once."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create(config_loader=config_loader)
    params = dict(sweeper.get("params") or {})
    jobs: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for grid in sweeper.get("grids") or [{}]:
        conf = [f"{k}={v}" for k, v in {**params, **dict(grid)}.items()] + list(arguments)
        for job in BasicSweeper.split_arguments(parser.parse_overrides(conf), None)[0]:
            key = tuple(sorted(job))
            if key not in seen:
                seen.add(key)
                jobs.append(list(job))
    return jobs


def check_some_cell_fits(config: DictConfig) -> None:
    """Refuse a multirun none of whose cells can run in one line, before its parent run or the store exists: a
    model or dataset its task does not take (``countboard.fit``), or what a cell's model or task needs and lacks
    (weights, local files, packages: ``countboard.preflight``). Cells are composed until one can run, so a sweep
    whose first cell can pays one composition, and a check that failed for one model and task is not run again.
    A sweep with some cells that can run runs, and each other cell says why in its own line (before its run
    exists). When every cell failed for one reason, the line gives it once."""
    from hydra.core.global_hydra import GlobalHydra

    from countboard.errors import ConfigError, CountboardError
    from countboard.fit import check_fit
    from countboard.preflight import preflight_cell

    if not GlobalHydra.instance().is_initialized():
        return
    loader = GlobalHydra.instance().config_loader()
    jobs = sweep_jobs(config.hydra.sweeper, list(config.hydra.overrides.task), loader)
    first, reasons, failed, misfits = None, set(), {}, 0
    for job in jobs:
        try:
            cell = loader.load_sweep_config(config, job)
        except Exception:  # a cell Hydra cannot compose fails in its own job, with Hydra's reason
            return
        try:
            try:
                check_fit(cell)
            except ConfigError:
                misfits += 1
                raise
            key = json.dumps([OmegaConf.to_container(cell[g], resolve=True) for g in ("model", "task")],
                             sort_keys=True, default=str)
            if key in failed:
                raise failed[key]
            try:
                preflight_cell(cell)
            except CountboardError as exc:
                failed[key] = exc
                raise
        except CountboardError as exc:
            first = first or f"{' '.join(job)}: {exc}"
            reasons.add(str(exc))
            continue
        except Exception:  # anything else fails in its own job, with its own report
            return
        return
    if first is None:
        return
    if misfits == len(jobs):
        raise ConfigError(f"none of the {len(jobs)} cells of this sweep fits, so nothing was run or created; "
                          f"the first, {first}")
    if len(reasons) == 1:
        raise ConfigError(f"{next(iter(reasons))} (every one of the {len(jobs)} cells of this sweep; nothing was "
                          "run or created)")
    raise ConfigError(f"none of the {len(jobs)} cells of this sweep can run, so nothing was run or created; "
                      f"the first, {first}")


def _sweep_name(overrides: list[str]) -> str:
    from countboard.config import clean_run_name

    return clean_run_name("sweep " + " ".join(sorted(o for o in overrides if "tracking" not in o)))


LEFT_RUNNING = "left RUNNING"


def close_parent(tracker, experiment_ids: str | list[str], run_id: str, ttl_s: float = 60.0) -> str:
    """Set the parent's status from its children's, found in ``experiment_ids`` (the experiments of the sweep's
    families); returns what was done, in words."""
    from countboard.tracking.lease import list_leases

    children = tracker.find_runs(experiment_ids, {tg.PARENT: run_id})
    statuses = [c.status for c in children]
    running = [c for c in children if c.status == st.RUNNING]
    live = {lease.key for lease in list_leases(tracker, experiment_ids) if not lease.expired(ttl_s)}
    if any(c.tags.get(tg.CONFIG_HASH) in live for c in running):
        return f"{len(running)} cells still running in another process; {LEFT_RUNNING}"
    n_bad = sum(s != st.FINISHED for s in statuses)
    tracker.set_tags(run_id, {tg.N_CHILDREN: len(children), tg.N_FAILED_CHILDREN: n_bad})
    tracker.set_status(run_id, st.FINISHED if n_bad == 0 else st.FAILED)
    return f"{len(children)} cells, {n_bad} not finished"


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
    run_id, sweep.run_id = sweep.run_id, None  # its exit-time close() must not set it from its (absent) children
    sweep.stop_owning()
    try:
        sweep.tracker.set_tags(run_id, {tg.ERROR: message[:5000]})
        outcome = close_parent(sweep.tracker, sweep.tracker.search_experiment_ids(sweep.pattern), run_id,
                               sweep.ttl_s)  # counts its children
        if outcome.endswith(LEFT_RUNNING):  # another live process runs some of its cells and will close it
            return run_id
        sweep.tracker.set_status(run_id, st.KILLED if isinstance(error, KeyboardInterrupt) else st.FAILED)
    except Exception as exc:  # the store is gone too: say so, the original error matters more
        log.error("could not mark sweep run %s failed: %s", run_id, exc)
        return None
    log.error("sweep run %s ended FAILED: %s", run_id, message[:1000])
    return run_id


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
