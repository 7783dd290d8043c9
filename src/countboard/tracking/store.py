"""A thin, retrying layer over ``MlflowClient``."""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from countboard.errors import ConfigError, TrackingStoreError

log = logging.getLogger(__name__)
T = TypeVar("T")

PARENT_TAG = "mlflow.parentRunId"
FINISHED, RUNNING, FAILED, KILLED = "FINISHED", "RUNNING", "FAILED", "KILLED"
_PARAM_VALUE_MAX = 6000
_BATCH = 100


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    status: str
    tags: dict[str, str]
    start_time: int


def local_store_uri(store_dir: str | os.PathLike) -> str:
    """SQLite URI of the embedded store in ``store_dir`` (``<store_dir>/mlflow.db``)."""
    db = Path(store_dir).expanduser().resolve() / "mlflow.db"
    return f"sqlite:///{db}"


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def _retry(fn: Callable[[], T], what: str, attempts: int = 12) -> T:
    """Call ``fn``, retrying with jittered backoff while SQLite reports lock contention."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:  # MlflowException wraps sqlalchemy.OperationalError
            if not _is_lock_error(exc) or attempt == attempts - 1:
                raise
            log.debug("store busy during %s; retrying in %.2fs", what, delay)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


class Tracker:
    """Talks to one MLflow tracking store.

    Args:
        uri: Tracking URI (``sqlite:///…/mlflow.db``, ``http://host:port``, ``postgresql://…``).
        artifact_root: Where new experiments keep artifacts (local stores: ``<store_dir>/artifacts``); None lets
            the server decide.
    """

    def __init__(self, uri: str, artifact_root: str | None = None, timeout_s: float = 10.0):
        self.uri = uri
        self.artifact_root = artifact_root
        self.timeout_s = timeout_s
        self._client = None

    @property
    def client(self):
        if self._client is None:
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(int(self.timeout_s)))
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
            from mlflow.tracking import MlflowClient

            self._client = _retry(lambda: MlflowClient(tracking_uri=self.uri), "connect")
        return self._client

    def check(self) -> None:
        """Fail fast, before any compute, when the store cannot be reached."""
        try:
            _retry(lambda: self.client.search_experiments(max_results=1), "check")
        except Exception as exc:
            raise TrackingStoreError(
                f"cannot reach the MLflow tracking store {self.uri!r}: {type(exc).__name__}: {str(exc)[:300]}. "
                "Start the server or fix `tracking.uri` / MLFLOW_TRACKING_URI (or use tracking=local)."
            ) from exc

    def experiment_id(self, name: str) -> str:
        """Id of experiment ``name``, created (with this tracker's artifact root) if missing."""

        def get_or_create() -> str:
            exp = self.client.get_experiment_by_name(name)
            if exp is not None:
                if exp.lifecycle_stage == "deleted":
                    raise TrackingStoreError(
                        f"experiment {name!r} is deleted in {self.uri}; restore it in the MLflow UI or choose "
                        "another `tracking.experiment`"
                    )
                return exp.experiment_id
            location = f"{self.artifact_root}/{name}" if self.artifact_root else None
            try:
                return self.client.create_experiment(name, artifact_location=location)
            except Exception as exc:  # another process created it first
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise exc
                return exp.experiment_id

        return _retry(get_or_create, "experiment")

    def find_runs(self, experiment_id: str, tags: Mapping[str, str], statuses: Iterable[str] | None = None
                  ) -> list[RunRecord]:
        """Active runs whose tags equal ``tags`` (newest first), optionally restricted to ``statuses``."""
        clauses = [f"tags.`{k}` = {_literal(v)}" for k, v in tags.items()]
        runs = _retry(lambda: self.client.search_runs([experiment_id], filter_string=" AND ".join(clauses),
                                                      order_by=["attributes.start_time DESC"], max_results=1000),
                      "search")
        wanted = set(statuses) if statuses else None  # MLflow filters status only by equality: do it here
        return [RunRecord(r.info.run_id, r.info.status, dict(r.data.tags), r.info.start_time) for r in runs
                if wanted is None or r.info.status in wanted]

    def create_run(self, experiment_id: str, run_name: str, tags: Mapping[str, str],
                   parent_run_id: str | None = None) -> str:
        all_tags = {k: str(v) for k, v in tags.items()}
        if parent_run_id:
            all_tags[PARENT_TAG] = parent_run_id
        run = _retry(lambda: self.client.create_run(experiment_id, run_name=run_name, tags=all_tags), "create run")
        return run.info.run_id

    def set_status(self, run_id: str, status: str) -> None:
        if status == RUNNING:
            _retry(lambda: self.client.update_run(run_id, status=RUNNING), "reopen run")
        else:
            _retry(lambda: self.client.set_terminated(run_id, status=status), "end run")

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
        _retry(lambda: self.client.log_artifact(run_id, str(path), artifact_path), "artifact")

    def log_dir(self, run_id: str, local_dir: str | os.PathLike, artifact_path: str | None = None) -> None:
        _retry(lambda: self.client.log_artifacts(run_id, str(local_dir), artifact_path), "artifacts")

    def log_json(self, run_id: str, obj: Any, artifact_file: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            path.write_text(json.dumps(obj, indent=2, default=str))
            parent = str(Path(artifact_file).parent)
            self.log_file(run_id, path, None if parent == "." else parent)

    def list_artifacts(self, run_id: str, path: str | None = None) -> list[str]:
        return [f.path for f in _retry(lambda: self.client.list_artifacts(run_id, path), "list artifacts")]

    def download(self, run_id: str, path: str, dst: str | os.PathLike) -> Path:
        return Path(_retry(lambda: self.client.download_artifacts(run_id, path, str(dst)), "download"))

    def log_complete_run(self, experiment: str, run_name: str, tags: Mapping[str, str], *,
                         params: Mapping[str, Any] | None = None, metrics: Mapping[str, float] | None = None,
                         artifacts_dir: str | os.PathLike | None = None, force: bool = False) -> str | None:
        """Log a finished run in one go (imports, trainings); skip if a FINISHED run has the same config_hash.

        Returns the run id, or None when skipped. ``tags`` must contain ``config_hash``.
        """
        if "config_hash" not in tags:
            raise ValueError("log_complete_run needs a `config_hash` tag to detect repeated imports")
        exp_id = self.experiment_id(experiment)
        if not force and self.find_runs(exp_id, {"config_hash": tags["config_hash"]}, [FINISHED]):
            return None
        run_id = self.create_run(exp_id, run_name, tags)
        try:
            if params:
                self.log_params(run_id, params)
            if metrics:
                self.log_metrics(run_id, metrics)
            if artifacts_dir:
                self.log_dir(run_id, artifacts_dir)
        except BaseException:
            self.set_status(run_id, FAILED)
            raise
        self.set_status(run_id, FINISHED)
        return run_id


def _literal(value: str) -> str:
    """A string literal for MLflow's filter syntax (single or double quotes; it has no escapes)."""
    value = str(value)
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ValueError(f"tag value {value!r} has both quote kinds and cannot be searched for")


def _enable_wal(db: Path) -> None:
    """Write-ahead logging lets parallel jobs read while one writes (the mode persists in the file)."""
    import sqlite3

    con = sqlite3.connect(db, timeout=30)
    try:
        if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()


def tracker_from_config(tracking) -> Tracker:
    """Build a ``Tracker`` from the ``tracking`` config group (``local`` or ``server``)."""
    kind = tracking.get("kind", "local")
    timeout = float(tracking.get("timeout_s", 10))
    if kind == "local":
        store_dir = Path(tracking.get("store_dir") or "mlruns").expanduser().resolve()
        store_dir.mkdir(parents=True, exist_ok=True)
        _enable_wal(store_dir / "mlflow.db")
        return Tracker(local_store_uri(store_dir), (store_dir / "artifacts").as_uri(), timeout)
    if kind == "server":
        uri = tracking.get("uri") or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            raise ConfigError("tracking=server needs a store: set MLFLOW_TRACKING_URI or pass "
                              "tracking.uri=http://HOST:PORT (or use tracking=local for the embedded store)")
        return Tracker(uri, tracking.get("artifact_root"), timeout)
    raise ConfigError(f"tracking.kind={kind!r} is not one of: local, server")
