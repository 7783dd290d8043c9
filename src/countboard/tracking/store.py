"""A thin, retrying layer over ``MlflowClient``."""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlparse
from urllib.request import url2pathname

from countboard.config import clean_run_name, validate_experiment
from countboard.errors import ConfigError, TrackingStoreError
from countboard.tracking import address
from countboard.tracking import tags as tg
from countboard.tracking.reach import REACH_TIMEOUT_S, first_line, http_limits, reach, redact

log = logging.getLogger(__name__)
T = TypeVar("T")

FINISHED, RUNNING, FAILED, KILLED = "FINISHED", "RUNNING", "FAILED", "KILLED"
_PARAM_VALUE_MAX = 6000
_BATCH = 100


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    status: str
    tags: dict[str, str]
    start_time: int


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def _is_concurrent_insert(exc: Exception) -> bool:
    """Another process inserted the same row first (SQLite's or PostgreSQL's unique-constraint error): MLflow
    looks a dataset up and then inserts it, so two cells logging one dataset at once can race; a second try finds
    the row and only links the run to it."""
    text = str(exc).lower()
    return "unique constraint failed" in text or "duplicate key value violates unique constraint" in text


def _retry(fn: Callable[[], T], what: str, attempts: int = 12,
           also: Callable[[Exception], bool] | None = None) -> T:
    """Call ``fn``, retrying with jittered backoff while SQLite reports lock contention (or ``also`` says the
    error is worth another try)."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:  # MlflowException wraps sqlalchemy.OperationalError
            again = _is_lock_error(exc) or (also is not None and also(exc))
            if not again or attempt == attempts - 1:
                raise
            log.debug("store busy during %s; retrying in %.2fs", what, delay)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


class _RaisedAnyway(logging.Filter):
    """MLflow logs each SQLAlchemy ``OperationalError`` with its traceback (``mlflow.store.db.utils``) and then
    raises it; the command that meets it names it in one line (a full disk, a lock that outlasted the retries),
    so the log record is dropped unless ``--debug`` (``COUNTBOARD_DEBUG``) asks for tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        from countboard.errors import debug_enabled

        return debug_enabled() or not str(record.msg).startswith("SQLAlchemy database error")


def _quiet_mlflow_database_errors() -> None:
    logger = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _RaisedAnyway) for f in logger.filters):
        logger.addFilter(_RaisedAnyway())


class Tracker:
    """Talks to one MLflow tracking store.

    Args:
        uri: Tracking URI (``sqlite:///…/mlflow.db``, ``http://host:port``, ``postgresql://…``).
        artifact_root: Where new experiments keep artifacts (local stores: ``<store_dir>/artifacts``); None lets
            the server decide.
        client_uri: The URI MLflow is given, when it differs from ``uri`` (a read-only store is opened
            ``immutable``: ``address.StoreAddress.client_uri``).
    """

    def __init__(self, uri: str, artifact_root: str | None = None, timeout_s: float = 10.0,
                 client_uri: str | None = None):
        self.uri = uri
        self.client_uri = client_uri or uri
        self.artifact_root = artifact_root
        self.timeout_s = timeout_s
        self._client = None

    @property
    def client(self):
        if self._client is None:
            http_limits(self.timeout_s)
            _quiet_mlflow_database_errors()
            from mlflow.tracking import MlflowClient

            self._client = _retry(lambda: MlflowClient(tracking_uri=self.client_uri), "connect")
        return self._client

    def check(self) -> None:
        """Fail fast, before any compute, when the store cannot be reached (within ``timeout_s`` for a server)."""
        reach(self.uri, self.timeout_s)
        try:
            _retry(lambda: self.client.search_experiments(max_results=1), "check")
        except Exception as exc:
            where = address.parse(self.uri)
            if where.db is not None:
                raise TrackingStoreError(
                    f"cannot open the local store {where.db}: {first_line(exc)}; run `countboard doctor --store "
                    f"{where.folder}` to check it") from exc
            raise TrackingStoreError(
                f"cannot use the MLflow tracking store {redact(self.uri)}: {first_line(exc).replace(self.uri, redact(self.uri))}; start the server or fix "
                f"--store / ${address.TRACKING_URI_ENV} / tracking.uri (or use a local store folder)") from exc

    def experiment_id(self, name: str) -> str:
        """Id of experiment ``name``, created (with this tracker's artifact root) if missing."""

        validate_experiment(name, "tracking.experiment")
        if "{" in name:
            raise ConfigError(f"experiment name {name!r} still holds a placeholder; fill it first "
                              "(tracking.experiments.experiment_name)")

        def get_or_create() -> str:
            exp = self.client.get_experiment_by_name(name)
            if exp is not None:
                if exp.lifecycle_stage == "deleted":
                    raise TrackingStoreError(
                        f"experiment {name!r} is deleted in {redact(self.uri)}; restore it in the MLflow UI or choose "
                        "another `tracking.experiment`"
                    )
                if exp.tags.get(tg.EXPERIMENT_KIND) is None:
                    self.client.set_experiment_tag(exp.experiment_id, tg.EXPERIMENT_KIND, tg.EXPERIMENT_KIND_ML)
                return exp.experiment_id
            try:
                return self.client.create_experiment(name, artifact_location=self._artifact_location(name),
                                                     tags={tg.EXPERIMENT_KIND: tg.EXPERIMENT_KIND_ML})
            except Exception as exc:  # another process created it first
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise exc
                return exp.experiment_id

        return _retry(get_or_create, "experiment")

    def family_experiment_id(self, pattern: str, family: str | None = None, group: str | None = None) -> str:
        """Id of the experiment ``pattern`` names for a run of ``family`` (or the group ``group``), created if
        missing (``tracking.experiments``)."""
        from countboard.tracking.experiments import experiment_name

        return self.experiment_id(experiment_name(pattern, family, group))

    def search_experiment_ids(self, pattern: str, first: str | None = None) -> list[str]:
        """Ids of the experiments that may hold runs under ``pattern``, ``first`` first: every experiment the
        pattern names and the one experiment of older stores (``tracking.experiments.search_ids``)."""
        from countboard.tracking.experiments import search_ids

        return search_ids(self.experiments(), pattern, first)

    def mark_default_experiment(self) -> None:
        """Give the store's Default experiment (id 0, which MLflow creates untagged) the classic kind, as the
        experiments created here have; an experiment that already has a kind keeps it."""
        try:
            exp = _retry(lambda: self.client.get_experiment(tg.DEFAULT_EXPERIMENT_ID), "experiment")
            if exp.lifecycle_stage == "active" and exp.tags.get(tg.EXPERIMENT_KIND) is None:
                _retry(lambda: self.client.set_experiment_tag(tg.DEFAULT_EXPERIMENT_ID, tg.EXPERIMENT_KIND,
                                                              tg.EXPERIMENT_KIND_ML), "experiment tag")
        except Exception as exc:  # no Default experiment (deleted for good), or a read-only server
            log.debug("Default experiment not tagged: %s", exc)

    def _artifact_location(self, name: str) -> str | None:
        """``<artifact_root>/<name>`` (one folder: ``countboard/counters`` keeps its artifacts in
        ``countboard-counters``), built with path APIs and checked to stay inside the root."""
        name = name.replace("/", "-")
        if not self.artifact_root:
            return None
        parsed = urlparse(self.artifact_root)
        if parsed.scheme not in ("", "file"):
            return f"{self.artifact_root.rstrip('/')}/{quote(name)}"
        root = Path(url2pathname(parsed.path) if parsed.scheme == "file" else self.artifact_root).resolve()
        location = (root / name).resolve()
        if not location.is_relative_to(root) or location == root:
            raise ConfigError(f"experiment name {name!r} would put artifacts outside the store ({root}); "
                              "choose a plain name")
        return location.as_uri() if parsed.scheme == "file" else str(location)

    def find_runs(self, experiment_id: str | Sequence[str], tags: Mapping[str, str],
                  statuses: Iterable[str] | None = None) -> list[RunRecord]:
        """Active runs of one experiment or several whose tags equal ``tags`` (newest first, every page),
        optionally restricted to ``statuses``."""
        ids = [experiment_id] if isinstance(experiment_id, str) else list(experiment_id)
        if not ids:
            return []
        clauses = [f"tags.`{k}` = {_literal(v)}" for k, v in tags.items()]
        runs, token = [], None
        while True:
            page = _retry(lambda t=token: self.client.search_runs(
                ids, filter_string=" AND ".join(clauses), order_by=["attributes.start_time DESC"],
                max_results=1000, page_token=t), "search")
            runs.extend(page)
            token = page.token
            if not token:
                break
        wanted = set(statuses) if statuses else None  # MLflow filters status only by equality: do it here
        return [RunRecord(r.info.run_id, r.info.status, dict(r.data.tags), r.info.start_time) for r in runs
                if wanted is None or r.info.status in wanted]

    def experiments(self, include_deleted: bool = False) -> list:
        """MLflow experiments of the store (active ones, or all)."""
        from mlflow.entities import ViewType

        view = ViewType.ALL if include_deleted else ViewType.ACTIVE_ONLY
        return _retry(lambda: self.client.search_experiments(view_type=view), "experiments")

    def run_ids(self, experiment_id: str) -> set[str]:
        """Ids of every run of the experiment, active or deleted (all pages)."""
        from mlflow.entities import ViewType

        ids, token = set(), None
        while True:
            page = _retry(lambda t=token: self.client.search_runs(
                [experiment_id], run_view_type=ViewType.ALL, max_results=1000, page_token=t), "search")
            ids.update(r.info.run_id for r in page)
            token = page.token
            if not token:
                return ids

    def last_change_ms(self) -> int:
        """The newest start or end time of any run (deleted ones included): when the store last changed."""
        from mlflow.entities import ViewType

        exps = [e.experiment_id for e in self.experiments()]
        latest = 0
        for order in ("start_time", "end_time"):
            for run in _retry(lambda o=order: self.client.search_runs(
                    exps, run_view_type=ViewType.ALL, max_results=1, order_by=[f"attributes.{o} DESC"]), "search"):
                latest = max(latest, run.info.start_time or 0, run.info.end_time or 0)
        return latest

    def params(self, run_id: str) -> dict[str, str]:
        return dict(_retry(lambda: self.client.get_run(run_id), "get run").data.params)

    def create_run(self, experiment_id: str, run_name: str, tags: Mapping[str, str],
                   parent_run_id: str | None = None) -> str:
        run_name = clean_run_name(run_name)
        all_tags = {k: str(v) for k, v in tags.items()}
        if parent_run_id:
            all_tags[tg.PARENT] = parent_run_id
        run = _retry(lambda: self.client.create_run(experiment_id, run_name=run_name, tags=all_tags), "create run")
        return run.info.run_id

    def log_datasets(self, run_id: str, refs: Sequence) -> None:
        """Log the datasets the run read (``tracking.datasets.DatasetRef``) as MLflow dataset inputs; a dataset
        logged before is not added again."""
        from countboard.tracking.datasets import dataset_inputs

        if refs:
            _retry(lambda: self.client.log_inputs(run_id, datasets=dataset_inputs(list(refs))), "log inputs",
                   also=_is_concurrent_insert)

    def set_status(self, run_id: str, status: str) -> None:
        """Reopen a run (``RUNNING``) or end it; a run that ends first records its artifact manifest."""
        if status == RUNNING:
            from countboard.tracking.manifest import NO_MANIFEST

            self.set_tags(run_id, NO_MANIFEST)  # what it logs now is in no manifest until it ends again
            _retry(lambda: self.client.update_run(run_id, status=RUNNING), "reopen run")
            return
        end_ms = int(time.time() * 1000)  # the manifest is for exactly this end time
        try:
            self.record_artifacts(run_id, end_ms)
        except Exception as exc:  # the run must end all the same; the index lists a run without a manifest
            log.warning("run %s: artifact manifest not recorded (%s: %s); the index will list its artifacts",
                        run_id, type(exc).__name__, str(exc)[:200])
        _retry(lambda: self.client.set_terminated(run_id, status=status, end_time=end_ms), "end run")

    def artifact_repository(self, artifact_uri: str):
        """The artifact repository behind ``artifact_uri``, resolved against this store."""
        return artifact_repository(artifact_uri, self.uri)

    def _run_repository(self, run_id: str, write: bool = False):
        """The artifact repository of run ``run_id``, found inside this store (``tracking.relocate``).

        Raises:
            TrackingStoreError: ``write`` and the run's artifacts of a local store lie outside its folder.
        """
        from countboard.tracking.relocate import resolve_run_uri, store_folder

        recorded = _retry(lambda: self.client.get_run(run_id), "get run").info.artifact_uri
        uri = resolve_run_uri(recorded, self.uri)
        folder = store_folder(self.uri)
        if write and folder is not None:
            path = Path(url2pathname(urlparse(uri).path)) if uri.startswith("file:") else Path(uri)
            if not path.resolve().is_relative_to(folder.resolve()):
                raise TrackingStoreError(
                    f"run {run_id} keeps its artifacts at {recorded}, outside the store {folder}; nothing is "
                    "written outside a store: run `countboard doctor --store <dir>` on it, or use another store")
        return artifact_repository(uri, self.uri)

    def record_artifacts(self, run_id: str, end_ms: int | None = None) -> dict[str, str]:
        """List the run's artifacts and keep the listing in its tags (``tracking.manifest``); returns the tags.

        Called when a run ends (``end_ms``: the end time it is about to get), and by code that logs into a run that
        has already ended (its end time stays).
        """
        from countboard.tracking import manifest

        info = _retry(lambda: self.client.get_run(run_id), "get run").info
        repo = self.artifact_repository(info.artifact_uri)  # resolved inside a local store
        tags = manifest.encode(_retry(lambda: manifest.list_tree(repo), "list artifacts"),
                               info.end_time if end_ms is None else end_ms)
        self.set_tags(run_id, tags)
        return tags

    def delete_run(self, run_id: str) -> None:
        _retry(lambda: self.client.delete_run(run_id), "delete run")

    def get_status(self, run_id: str) -> str:
        return _retry(lambda: self.client.get_run(run_id), "get run").info.status

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)[:5000]) for k, v in tags.items()]
        for i in range(0, len(items), _BATCH):
            _retry(lambda chunk=items[i:i + _BATCH]: self.client.log_batch(run_id, tags=chunk), "tags")

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Log params, skipping keys already logged with the same value (resumed runs)."""
        from mlflow.entities import Param

        existing = _retry(lambda: self.client.get_run(run_id), "get run").data.params
        items = []
        for k, v in params.items():
            value = str(v)[:_PARAM_VALUE_MAX]
            if k in existing:
                continue
            items.append(Param(k, value))
        for i in range(0, len(items), _BATCH):
            _retry(lambda chunk=items[i:i + _BATCH]: self.client.log_batch(run_id, params=chunk), "params")

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(items), _BATCH * 10):
            _retry(lambda chunk=items[i:i + _BATCH * 10]: self.client.log_batch(run_id, metrics=chunk), "metrics")

    def log_file(self, run_id: str, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        repo = self._run_repository(run_id, write=True)
        _retry(lambda: repo.log_artifact(str(path), artifact_path), "artifact")

    def add_to_ended_run(self, run_id: str, path: str | os.PathLike, artifact_path: str | None = None) -> None:
        """Log a file into a run that has already ended, and refresh the run's artifact manifest so the index
        (at its next scan) names the new file."""
        self.log_file(run_id, path, artifact_path)
        self.record_artifacts(run_id)

    def log_dir(self, run_id: str, local_dir: str | os.PathLike, artifact_path: str | None = None) -> None:
        repo = self._run_repository(run_id, write=True)
        _retry(lambda: repo.log_artifacts(str(local_dir), artifact_path), "artifacts")

    def log_json(self, run_id: str, obj: Any, artifact_file: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_text(json.dumps(obj, indent=2, default=str))
            parent = str(Path(artifact_file).parent)
            self.log_file(run_id, path, None if parent == "." else parent)

    def list_artifacts(self, run_id: str, path: str | None = None) -> list[str]:
        repo = self._run_repository(run_id)
        return [f.path for f in _retry(lambda: repo.list_artifacts(path), "list artifacts")]

    def download(self, run_id: str, path: str, dst: str | os.PathLike) -> Path:
        """Copy the run's artifact ``path`` into the folder ``dst`` (created when missing); returns the copy."""
        Path(dst).mkdir(parents=True, exist_ok=True)
        repo = self._run_repository(run_id)
        return Path(_retry(lambda: repo.download_artifacts(path, str(dst)), "download"))

    def log_complete_run(self, experiment: str, run_name: str, tags: Mapping[str, str], *,
                         params: Mapping[str, Any] | None = None, metrics: Mapping[str, float] | None = None,
                         artifacts_dir: str | os.PathLike | None = None, force: bool = False,
                         datasets: Sequence = ()) -> str | None:
        """Log a finished run in one go (imports, trainings); skip if a FINISHED run has the same config_hash.

        ``experiment`` is a name or a pattern (``countboard/{family}``, filled with the ``family`` tag); the run is
        looked for in every experiment of the pattern. ``datasets``: what it was made from
        (``tracking.datasets.DatasetRef``). Returns the run id, or None when skipped. ``tags`` must
        contain ``config_hash``.
        """
        if tg.CONFIG_HASH not in tags:
            raise ValueError(f"log_complete_run needs a `{tg.CONFIG_HASH}` tag to detect repeated imports")
        exp_id = self.family_experiment_id(experiment, tags.get(tg.FAMILY))
        seen = self.search_experiment_ids(experiment, exp_id)
        if not force and self.find_runs(seen, {tg.CONFIG_HASH: tags[tg.CONFIG_HASH]}, [FINISHED]):
            return None
        from countboard.tracking.lease import owner_tags

        run_id = self.create_run(exp_id, run_name, {**tags, **owner_tags()})  # doctor ends it if we are killed
        try:
            if params:
                self.log_params(run_id, params)
            self.log_datasets(run_id, datasets)
            if metrics:
                self.log_metrics(run_id, metrics)
            if artifacts_dir:
                self.log_dir(run_id, artifacts_dir)
        except BaseException:
            self.set_status(run_id, FAILED)
            raise
        self.set_status(run_id, FINISHED)
        return run_id


def artifact_repository(artifact_uri: str, store_uri: str | None):
    """The artifact repository of a run, resolved against ``store_uri`` (not the process-wide tracking URI).

    A server with proxied artifacts hands out ``mlflow-artifacts:/…`` URIs, which only mean something relative to
    the server they came from: the same resolution ``MlflowClient(store_uri)`` uses, without its ``get_run`` call.
    A local store's recorded locations are read inside its current folder (``tracking.relocate``).
    """
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    from countboard.tracking.relocate import resolve_run_uri

    return get_artifact_repository(resolve_run_uri(artifact_uri, store_uri), tracking_uri=store_uri)


def _literal(value: str) -> str:
    """A string literal for MLflow's filter syntax (single or double quotes; it has no escapes)."""
    value = str(value)
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(f"tag value {value!r} has both quote kinds and cannot be searched for")


def open_store(arg: str | None = None, *, create: bool = False, timeout_s: float = 10.0) -> Tracker:
    """The store a command works on (``--store``, ``$COUNTBOARD_STORE``, ``$MLFLOW_TRACKING_URI``, ``./mlruns``;
    ``countboard.tracking.address``).

    Args:
        arg: What the user passed (a folder, a ``.db`` file or a tracking URI), or None.
        create: Create a missing local store (commands that write); read-only commands leave it False, so a
            mistyped path is an error instead of a new, empty store.
        timeout_s: HTTP timeout for a server store.
    """
    return open_address(address.resolve(arg), create=create, timeout_s=timeout_s)


def open_address(where: address.StoreAddress, *, create: bool = False, timeout_s: float = 10.0) -> Tracker:
    """A ``Tracker`` on the store at ``where`` (an embedded store is created first when ``create``; a server that
    does not answer is an error at once)."""
    reach(where.uri, timeout_s)
    if where.is_embedded:
        from countboard.tracking.local_store import ensure_local_store

        ensure_local_store(where.folder, create=create)
    elif where.db is not None and not create and not where.db.is_file():
        raise TrackingStoreError(f"no MLflow store at {where.db}; check --store / ${address.STORE_ENV}")
    return Tracker(where.uri, where.artifact_root, timeout_s, client_uri=where.client_uri)


def reach_config(tracking) -> None:
    """``reach`` the server of a ``tracking=server`` config (before anything else is built)."""
    if tracking.get("kind", "local") == "server":
        uri = tracking.get("uri") or os.environ.get(address.TRACKING_URI_ENV)
        if uri:
            reach(address.parse(uri).uri, float(tracking.get("timeout_s", REACH_TIMEOUT_S)))


def config_folder(tracking) -> Path | None:
    """The folder of a ``tracking=local`` config's store (None for a server): where its writes go."""
    if tracking is None or tracking.get("kind", "local") != "local":
        return None
    return address.parse(tracking.get("store_dir") or address.DEFAULT_STORE).folder


def tracker_from_config(tracking) -> Tracker:
    """Build a ``Tracker`` from the ``tracking`` config group (``local`` or ``server``)."""
    kind = tracking.get("kind", "local")
    timeout = float(tracking.get("timeout_s", 10))
    if kind == "local":
        return open_address(address.parse(tracking.get("store_dir") or address.DEFAULT_STORE), create=True,
                            timeout_s=timeout)
    if kind == "server":
        uri = tracking.get("uri") or os.environ.get(address.TRACKING_URI_ENV)
        if not uri:
            raise ConfigError(f"tracking=server needs a store: set {address.TRACKING_URI_ENV} or pass "
                              "tracking.uri=http://HOST:PORT (or use tracking=local for the embedded store)")
        return Tracker(address.parse(uri).uri, tracking.get("artifact_root"), timeout)
    raise ConfigError(f"tracking.kind={kind!r} is not one of: local, server")
