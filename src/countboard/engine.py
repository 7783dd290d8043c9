"""One sweep cell = one MLflow run: validate → claim → skip or resume → checkpointed units → summary → artifacts.

``run_job(cfg)`` is what ``countboard-sweep`` calls for every job, in whatever process the launcher uses.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from countboard.batching import Batching
from countboard.cell import Cell, resolve_device
from countboard.config import AUTO, SUBSET_NODE_KEYS, check_nodes, instantiate_node, validate
from countboard.errors import CountboardError, TrackingStoreError, WriteError, debug_enabled, write_error
from countboard.fit import check_fit
from countboard.inputs import InputStream, resolve_workers
from countboard.models.precision import numerics
from countboard.preflight import preflight_cell
from countboard.results import RunContext, Task, TaskResult, check_outputs, missing_text, split_metrics
from countboard.schema import load_schema
from countboard.tracking import address, checkpoints, failpoints, tracker_from_config
from countboard.tracking import store as st
from countboard.tracking import tags as tg
from countboard.tracking.artifacts import write_result
from countboard.tracking.reach import first_line, store_failure, store_name, store_todo

log = logging.getLogger("countboard")


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, ``kill``): ends the run this process owns as KILLED, like Ctrl-C."""


class LeaseLost(CountboardError):
    """Another process took the cell over (this one stalled past ``lease_ttl_s``)."""


@dataclass
class Progress:
    """Where a job is, for the one line that names a store which stopped answering.

    ``step`` is what the job is asking of the store (None while the task computes: an error then is the task's),
    ``saved`` and ``total`` the units checkpointed in the store and those the run covers, ``run_id`` the cell's
    run once open; ``report``, if set, is called with this object after every change (a sweep's progress line).
    """

    name: str = ""
    uri: str = ""
    step: str | None = "opening it"
    saved: int = 0
    total: int = 0
    run_id: str | None = None
    report: Callable[[Progress], None] | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)
        if key != "report" and self.__dict__.get("report") is not None:
            self.report(self)

    def lost_store(self, exc: BaseException) -> str | None:
        """One line when ``exc`` says the store stopped answering during a step of the job, else None.

        Example:
            >>> Progress("toy", "http://h:5000", "logging its metrics", 12, 12).lost_store(
            ...     ConnectionRefusedError(111, "Connection refused"))[:100]
            'the MLflow server at http://h:5000 stopped answering during cell toy, logging its metrics (connectio'
        """
        reason = store_failure(exc) if self.step is not None and self.uri else None
        if reason is None or isinstance(exc, CountboardError):
            return None
        kept = (f"{self.saved} of {self.total} units are checkpointed in the store and the rerun resumes from them"
                if self.total else "no unit of this cell was computed yet")
        return (f"{store_name(self.uri)} stopped answering during cell {self.name or '?'}, {self.step} ({reason}); "
                f"{store_todo(self.uri)}, then run the same command again: {kept}")


def _config_uri(tracking) -> str:
    """The tracking URI a ``tracking`` config names (before a tracker exists)."""
    if tracking is None:
        return ""
    if tracking.get("kind", "local") == "server":
        return tracking.get("uri") or os.environ.get(address.TRACKING_URI_ENV, "")
    return address.parse(tracking.get("store_dir") or address.DEFAULT_STORE).uri


@contextlib.contextmanager
def _sigterm_as_interrupt():
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _split_records(frames: Sequence[pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Latest record per unit; successful ones and failures apart (both keep ``unit_id``)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["unit_id"]), pd.DataFrame(columns=["unit_id", "error"])
    df = pd.concat(frames, ignore_index=True).drop_duplicates("unit_id", keep="last")
    if "error" not in df:
        return df.reset_index(drop=True), pd.DataFrame(columns=["unit_id", "error"])
    failed = df["error"].notna() & (df["error"].astype(str) != "")
    ok = df[~failed].drop(columns=["error"])
    ok = ok[["unit_id", *[c for c in ok.columns if c != "unit_id" and ok[c].notna().any()]]]
    return ok.reset_index(drop=True), df.loc[failed, ["unit_id", "error"]].reset_index(drop=True)


def _subset_filters(cfg: DictConfig) -> list[str]:
    """``group.key=value`` of every subset filter set in the model, dataset or task node."""
    return [f"{group}.{key}={cfg[group][key]}" for group in ("model", "dataset", "task")
            for key in SUBSET_NODE_KEYS if cfg[group].get(key) is not None]


def _unit_list(task: Task, model: Any, dataset: Any, ctx: RunContext, cell: Cell) -> list[str]:
    """The units this run covers; tags the run partial when ``max_samples`` leaves some out or a node's subset
    filter (``dataset.max_images``, …) is set."""
    units = [str(u) for u in task.units(model, dataset, ctx)]
    total = len(units)
    if ctx.max_samples is not None:
        units = units[: ctx.max_samples]
    filters = _subset_filters(cell.cfg)
    cell.tracker.set_tags(cell.run_id, {tg.N_UNITS: len(units), tg.TOTAL_UNITS: total,
                                        tg.PARTIAL: str(len(units) < total or bool(filters)).lower(),
                                        tg.SUBSET: " ".join(filters)})
    return units


def compute_units(task: Task, model: Any, dataset: Any, ctx: RunContext, cell: Cell, every: int,
                  progress: Progress | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Evaluate every unit without a checkpointed successful record; checkpoint every ``every`` units."""
    progress = progress or Progress()
    progress.step = "restoring its checkpoints"
    frames, next_part = checkpoints.load(cell.tracker, cell.run_id)
    ok, _ = _split_records(frames)
    done = set(ok["unit_id"].astype(str)) if len(ok) else set()
    progress.step = "tagging its run"
    units = _unit_list(task, model, dataset, ctx, cell)
    todo = [u for u in units if u not in done]
    progress.saved, progress.total = len(units) - len(todo), len(units)
    if done:
        log.info("%s: %d of %d units restored from checkpoints", cell.name, len(units) - len(todo), len(units))
    bar = tqdm(total=len(units), initial=len(units) - len(todo), desc=cell.name, disable=not ctx.progress,
               unit="unit", leave=False)
    chunks = [todo[start:start + every] for start in range(0, len(todo), every)]
    pending: list[tuple[int, list[dict]]] = []  # a chunk's part computed, not yet in the store

    def write_pending() -> None:
        if not pending:
            return
        index, records = pending.pop()
        progress.step = "writing a checkpoint"
        checkpoints.write(cell.tracker, cell.run_id, index, records)
        progress.step = None
        progress.saved += len(records)
        bar.update(len(records))

    with _input_stream(task, model, dataset, chunks, ctx, cell.cfg) as ctx.inputs:
        try:
            for chunk in chunks:
                if cell.lease is not None and cell.lease.lost.is_set():
                    raise LeaseLost(f"{cell.name}: another process took over run {cell.run_id} (this one was "
                                    "silent longer than lease_ttl_s); stopped without touching it")
                if task.writes_while_queued:
                    ctx.on_queued = write_pending  # written once the task's device work is queued
                else:
                    write_pending()
                progress.step = None
                records = task.run_units(model, dataset, chunk, ctx)
                ctx.on_queued = None
                write_pending()  # the task queued no device work
                _check_records(records, chunk, task)
                records = check_outputs(records, task.model_outputs)  # a NaN or inf from the model fails its unit
                pending.append((next_part, records))
                frames.append(pd.DataFrame.from_records(records))
                next_part += 1
            write_pending()
        except BaseException:
            ctx.on_queued = None
            _keep_pending(write_pending, pending, progress)
            raise
    ctx.inputs = None
    bar.close()
    ok, failed = _split_records(frames)
    keep = set(units)
    return ok[ok["unit_id"].astype(str).isin(keep)].reset_index(drop=True), \
        failed[failed["unit_id"].astype(str).isin(keep)].reset_index(drop=True)


def _keep_pending(write_pending, pending: list, progress: Progress) -> None:
    """On the way out of a failed or stopped job: write the part computed but not yet written (a task that writes
    while its device work is queued stopped before it queued any), so the job keeps every chunk it computed. The
    job's own error is the one reported; a part that cannot be written either is logged."""
    if not pending:
        return
    step = progress.step
    try:
        write_pending()
    except Exception as exc:
        log.debug("the last checkpoint part was not written either: %s", first_line(exc))
    progress.step = step


@contextlib.contextmanager
def _input_stream(task: Task, model: Any, dataset: Any, chunks: list[list[str]], ctx: RunContext,
                  cfg: DictConfig):
    """The inputs of every chunk, decoded ahead by ``num_workers`` processes (None when the task lists none);
    the workers end with the block, whatever ends it."""
    keys = [task.input_keys(model, dataset, chunk, ctx) for chunk in chunks]
    if not chunks or any(k is None for k in keys):
        yield None
        return
    workers = resolve_workers(cfg.get("num_workers", AUTO))
    stream = InputStream(dataset.load, [k for chunk_keys in keys for k in chunk_keys], workers,
                         pin_memory=ctx.device.startswith("cuda"))
    try:
        yield stream
    finally:
        stream.close()


def _check_records(records: list[dict], chunk: list[str], task: Task) -> None:
    got = [str(r.get("unit_id")) for r in records]
    if sorted(got) != sorted(chunk):
        raise RuntimeError(f"task {task.name!r} returned records for {got[:5]}… but was asked for {chunk[:5]}…; "
                           "run_units must return exactly one record per unit id")


def _validate_metrics(metrics: dict[str, float]) -> None:
    schema = load_schema()
    for key in metrics:
        schema.metric(key)


def _open_cell(cfg: DictConfig) -> tuple[Cell, Any]:
    """Validate every key, build the dataset and fingerprint it, then reach the store: a config that cannot run
    fails before the store is touched (nothing is created), and all of it before any run exists."""
    from countboard.fingerprint import dataset_fingerprint

    validate(cfg)
    check_nodes(cfg)
    check_fit(cfg)  # a model or dataset the task does not take: one line naming what fits, before anything runs
    st.reach_config(cfg.tracking)  # a down server is named before the dataset is built
    resolve_device(cfg.device)
    preflight_cell(cfg)  # missing weights, files or packages, before the dataset is built
    dataset = instantiate_node(cfg, "dataset")
    fingerprint = dataset_fingerprint(dataset, OmegaConf.to_container(cfg.dataset, resolve=True))
    tracker = tracker_from_config(cfg.tracking)
    tracker.check()
    return Cell(cfg, tracker, fingerprint), dataset


def run_job(cfg: DictConfig, report: Callable[[Progress], None] | None = None) -> str | None:
    """Run one cell. Returns the run id, or None when skipped (finished, or owned by another process).

    ``report`` is called with the job's ``Progress`` after each change of it (its cell, step, units, run id).

    Raises:
        WriteError: A file system refused a write anywhere in the job (the store's database or artifacts, a
            checkpoint, a temporary file): one line naming that file system and what to do, whatever layer met
            it; the units checkpointed before are kept.
        TrackingStoreError: The store stopped answering during a step of the job (a server gone, a refused or
            timed-out request, a lost database connection): one line naming the store, the step and what to do;
            the units checkpointed before stay in the store and the rerun resumes from them.
    """
    progress = Progress(uri=_config_uri(cfg.get("tracking")), report=report)
    try:
        return _run_job(cfg, progress)
    except Exception as exc:
        line = write_error(exc, st.config_folder(cfg.get("tracking")))
        if line is not None:
            raise WriteError(line) from exc
        lost = progress.lost_store(exc)
        if lost is not None:
            raise TrackingStoreError(lost) from exc
        raise


def _run_job(cfg: DictConfig, progress: Progress) -> str | None:
    t0 = time.time()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cell, dataset = _open_cell(cfg)
    progress.name, progress.uri, progress.step = cell.name, cell.tracker.uri, "claiming it"
    if not cell.claim():
        return None
    records = failed = None
    # the task's own files (logged as artifacts when the cell finishes), removed with the job however it ends
    with _sigterm_as_interrupt(), tempfile.TemporaryDirectory(prefix="countboard-") as work_dir:
        try:
            failpoints.hit("cell_start")
            progress.step = "starting its run"
            if not cell.open_run(cell.family):
                return None
            progress.step, progress.run_id = None, cell.run_id
            batching = Batching(cfg.batch_size, cell.device)
            ctx = RunContext(device=cell.device, seed=int(cfg.seed), batch_size=batching.size, batching=batching,
                             work_dir=Path(work_dir), progress=bool(cfg.progress),
                             max_samples=cfg.get("max_samples"))
            task: Task = instantiate_node(cfg, "task")
            with numerics(cell.device, str(cfg.get("precision", "fp32"))):
                model = instantiate_node(cfg, "model", device=cell.device)
                if hasattr(model, "run_tags") and model.run_tags():
                    progress.step = "tagging its run"
                    cell.tracker.set_tags(cell.run_id, model.run_tags())
                records, failed = compute_units(task, model, dataset, ctx, cell, int(cfg.checkpoint_every),
                                                progress)
                _finish(cell, task, model, dataset, ctx, records, failed, t0, progress)
            return cell.run_id
        except BaseException as exc:
            _record_failure(cell, exc, records, failed, progress)
            raise
        finally:
            cell.release()


def _finish(cell: Cell, task: Task, model: Any, dataset: Any, ctx: RunContext, records: pd.DataFrame,
            failed: pd.DataFrame, t0: float, progress: Progress | None = None) -> None:
    progress = progress or Progress()
    progress.step = None
    if not len(records) and len(failed):
        first = failed.iloc[0]
        raise CountboardError(f"all {len(failed)} units of {cell.name} failed (first: {first['unit_id']}: "
                              f"{str(first['error'])[:200]}); see failures.json in run {cell.run_id}")
    result = task.summarize(records, model, dataset, ctx) if len(records) else TaskResult(metrics={})
    computed, missing = split_metrics(result.metrics, result.missing, len(records))
    metrics = {**computed, "n_samples": len(records), "n_failed_samples": len(failed),
               "duration_s": time.time() - t0}
    _validate_metrics({**metrics, **missing})
    failpoints.hit("cell_artifacts")
    progress.step = "logging its artifacts"
    write_result(cell.tracker, cell.run_id, result, records, failed)
    failpoints.hit("cell_metrics")
    progress.step = "logging its metrics"
    cell.tracker.log_metrics(cell.run_id, metrics)
    cell.tracker.set_tags(cell.run_id, {tg.N_FAILED_UNITS: len(failed), tg.MISSING_METRICS: missing_text(missing)})
    if missing:
        log.warning("%s: %d metrics not computed on these units: %s", cell.name, len(missing), missing_text(missing))
    failpoints.hit("cell_end")
    progress.step = "ending its run"
    cell.tracker.set_status(cell.run_id, st.FINISHED)
    cell.finished = True
    if len(failed):
        log.warning("%s: %d units failed; see failures.json in run %s (the next run of the cell retries them)",
                    cell.name, len(failed), cell.run_id)
    log.info("done %s → run %s", cell.name, cell.run_id)


def _record_failure(cell: Cell, exc: BaseException, records, failed, progress: Progress | None = None) -> None:
    """Keep what was computed, and say why the run failed; only for a run this process owns and did not finish.

    A store that stopped answering is asked once (the run's error tag): when it still does not answer, nothing
    more is tried, and the job's one line says what happened (the run stays RUNNING, owned by no live process,
    until the rerun resumes it).
    """
    if cell.run_id is None or cell.finished or isinstance(exc, LeaseLost):
        return
    lost = progress.lost_store(exc) if progress is not None else None
    if lost is not None:
        try:
            cell.tracker.set_tags(cell.run_id, {tg.ERROR: lost[:5000]})
        except Exception as again:
            log.debug("run %s: the failure is not recorded (%s)", cell.run_id, first_line(again))
            return
    written = write_error(exc, st.config_folder(cell.cfg.get("tracking")))
    message = written or f"{type(exc).__name__}: {exc}"
    try:
        if cell.tracker.get_status(cell.run_id) == st.FINISHED:
            return
        cell.tracker.set_tags(cell.run_id, {tg.ERROR: message[:5000]})
        cell.tracker.log_json(cell.run_id, {"error": message, "traceback": traceback.format_exc()}, "error.json")
        if failed is not None and len(failed):
            cell.tracker.log_json(cell.run_id, failed.to_dict("records"), "failures.json")
        cell.tracker.set_status(cell.run_id, st.KILLED if isinstance(exc, KeyboardInterrupt) else st.FAILED)
    except Exception as again:  # the store itself may be what failed (full, read-only): the job's error says so
        log.warning("could not record the failure of run %s: %s", cell.run_id, first_line(again),
                    exc_info=debug_enabled())
    if lost is not None:  # the job's own line says it
        return
    log.error("%s failed: %s (run %s keeps its checkpoints; rerun to resume)", cell.name, message, cell.run_id)

