"""Reading an MLflow store page by page through ``MlflowClient``, for the index builder."""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass, field

from countboard import protocol
from countboard.tracking import manifest
from countboard.tracking import tags as tg
from countboard.tracking.store import artifact_repository
from countboard.tracking.tags import RunTags

log = logging.getLogger(__name__)

PAGE_SIZE = 1000
_EXPERIMENT_BATCH = 100


@dataclass(frozen=True)
class MetricPoint:
    value: float
    step: int
    timestamp: int


@dataclass
class RunSnapshot:
    """What one page of ``search_runs`` says about a run: info, tags, params and latest metrics."""

    run_id: str
    experiment_id: str
    run_name: str
    status: str
    user_id: str
    start_time: int | None
    end_time: int | None
    lifecycle_stage: str
    artifact_uri: str
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, MetricPoint] = field(default_factory=dict)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Changes whenever the status, end time, name, a tag, a param or a latest metric changes (computed once:
        read the snapshot's fields, do not change them)."""
        h = hashlib.sha256()
        for part in (self.status, self.end_time, self.run_name, self.lifecycle_stage, self.artifact_uri,
                     sorted(self.tags.items()), sorted(self.params.items()),
                     sorted((k, p.value, p.step, p.timestamp) for k, p in self.metrics.items())):
            h.update(repr(part).encode())
            h.update(b"\x00")
        return h.hexdigest()[:32]

    def row(self) -> dict:
        """The ``runs`` row, with the run conventions' tags lifted into columns.

        ``generator`` and ``evaluator`` come from the tags tasks set; a run tagged with a generator other than its
        model (a classifier judging a generator's outputs) has its model as evaluator (``RunTags.judge``).
        ``protocol`` is the run's tag, or for a run made before protocols were tagged, derived from its params
        (``countboard.protocol``).
        """
        t = RunTags.from_tags(self.tags)
        proto = protocol.of_run(t.protocol, t.protocol_label, self.params) \
            if t.task and t.role not in tg.AGGREGATE_ROLES else None
        return {
            "run_id": self.run_id, "experiment_id": self.experiment_id, "run_name": self.run_name,
            "status": self.status, "user_id": self.user_id, "start_time": self.start_time,
            "end_time": self.end_time, "lifecycle_stage": self.lifecycle_stage, "artifact_uri": self.artifact_uri,
            "parent_run_id": t.parent, "is_sweep": t.role in tg.AGGREGATE_ROLES,
            tg.FAMILY: t.family, tg.MODEL: t.model, tg.DATASET: t.dataset,
            tg.SPLIT: t.split or self.params.get("dataset.split"), tg.TASK: t.task,
            tg.MODEL_KIND: t.model_kind, tg.GENERATOR: t.generator, tg.EVALUATOR: t.judge,
            tg.CONFIG_HASH: t.config_hash, tg.PROTOCOL: proto.key if proto else None,
            tg.PROTOCOL_LABEL: proto.label if proto else None,
            tg.GIT_COMMIT: t.git_commit, "fingerprint": self.fingerprint,
        }


def list_experiments(client) -> list:
    """Every active experiment, all pages."""
    out, token = [], None
    while True:
        page = client.search_experiments(max_results=PAGE_SIZE, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def _snapshot(run) -> RunSnapshot:
    info, data = run.info, run.data
    metrics = {m.key: MetricPoint(float(m.value), int(m.step), int(m.timestamp)) for m in data._metric_objs}
    return RunSnapshot(run_id=info.run_id, experiment_id=str(info.experiment_id), run_name=info.run_name or "",
                       status=info.status, user_id=info.user_id or "", start_time=info.start_time,
                       end_time=info.end_time, lifecycle_stage=info.lifecycle_stage,
                       artifact_uri=info.artifact_uri or "", tags=dict(data.tags), params=dict(data.params),
                       metrics=metrics)


def list_runs(client, experiment_ids: list[str], filter_string: str = "", deleted: bool = False,
              store_uri: str | None = None) -> dict[str, RunSnapshot]:
    """Runs of ``experiment_ids`` matching ``filter_string``, read ``PAGE_SIZE`` at a time (active ones, or the
    deleted ones with ``deleted``).

    Pages are ordered by start time, oldest first, so runs a sweep creates while we read land on later pages
    instead of shifting earlier ones. Without a filter, a ``sqlite:///`` ``store_uri`` is read directly
    (``list_runs_sqlite``).
    """
    from mlflow.entities import ViewType

    if not filter_string and (db_file := sqlite_file(store_uri)) is not None:
        return list_runs_sqlite(db_file, experiment_ids, deleted)

    view = ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY
    runs: dict[str, RunSnapshot] = {}
    for i in range(0, len(experiment_ids), _EXPERIMENT_BATCH):
        batch, token = experiment_ids[i:i + _EXPERIMENT_BATCH], None
        while True:
            page = client.search_runs(batch, filter_string=filter_string, run_view_type=view, max_results=PAGE_SIZE,
                                      page_token=token,
                                      order_by=["attributes.start_time ASC", "attributes.run_id ASC"])
            for run in page:
                if run.data.tags.get(tg.ROLE) != tg.ROLE_LEASE:  # ownership claims, not results
                    runs[run.info.run_id] = _snapshot(run)
            token = page.token
            if not token:
                break
    return runs


def sqlite_file(store_uri: str | None) -> str | None:
    """The database file of a ``sqlite:`` store (read directly by ``list_runs``), else None.

    Example:
        >>> sqlite_file("sqlite:////x/my%20store/mlflow.db"), sqlite_file("http://h:5000")
        ('/x/my store/mlflow.db', None)
    """
    from countboard.tracking.address import parse

    db = parse(store_uri).db if store_uri else None
    return str(db) if db is not None else None


def list_runs_sqlite(db_file: str, experiment_ids: list[str], deleted: bool = False) -> dict[str, RunSnapshot]:
    """``list_runs`` without a filter, read straight from the tables of an SQLite store: the same snapshots as
    ``MlflowClient.search_runs`` builds (info from ``runs``, tags, params, and each metric's latest point from
    ``latest_metrics``), without building MLflow's ORM objects and entities, which cost about 30 s per 10,000
    runs of 100 metrics. One read transaction, so a sweep writing meanwhile is seen before or after a write,
    never halfway."""
    from pathlib import Path

    from countboard.tracking.integrity import connect_ro

    con = connect_ro(Path(db_file))  # a read-only folder: opened immutable, nothing written
    con.isolation_level = None
    try:
        con.execute("BEGIN")
        con.execute("CREATE TEMP TABLE wanted (run_uuid TEXT PRIMARY KEY)")
        marks = ",".join("?" * len(experiment_ids))
        con.execute(f"INSERT INTO wanted SELECT run_uuid FROM runs WHERE lifecycle_stage = ? "
                    f"AND CAST(experiment_id AS TEXT) IN ({marks})",
                    ["deleted" if deleted else "active", *[str(e) for e in experiment_ids]])
        runs: dict[str, RunSnapshot] = {}
        for rid, exp, name, status, user, start, end, stage, uri in con.execute(
                "SELECT r.run_uuid, r.experiment_id, r.name, r.status, r.user_id, r.start_time, r.end_time, "
                "r.lifecycle_stage, r.artifact_uri FROM runs r JOIN wanted USING (run_uuid)"):
            runs[rid] = RunSnapshot(run_id=rid, experiment_id=str(exp), run_name=name or "", status=status,
                                    user_id=user or "", start_time=start, end_time=end, lifecycle_stage=stage,
                                    artifact_uri=uri or "")
        for rid, key, value in con.execute(
                "SELECT run_uuid, key, value FROM tags WHERE run_uuid IN (SELECT run_uuid FROM wanted)"):
            runs[rid].tags[key] = value
        for rid, key, value in con.execute(
                "SELECT run_uuid, key, value FROM params WHERE run_uuid IN (SELECT run_uuid FROM wanted)"):
            runs[rid].params[key] = value
        nan = float("nan")
        for rid, key, value, step, ts, is_nan in con.execute(
                "SELECT run_uuid, key, value, step, timestamp, is_nan FROM latest_metrics "
                "WHERE run_uuid IN (SELECT run_uuid FROM wanted)"):
            runs[rid].metrics[key] = MetricPoint(nan if is_nan else float(value), int(step), int(ts or 0))
        con.execute("ROLLBACK")
    finally:
        con.close()
    return {rid: r for rid, r in runs.items() if r.tags.get(tg.ROLE) != tg.ROLE_LEASE}


def list_changed_runs(client, experiment_ids: list[str], since_ms: int, also: list[str]) -> dict[str, RunSnapshot]:
    """Active runs that may have changed since ``since_ms``: started or ended since then, still running, or in
    ``also`` (runs that were running at the last index).

    Three disjoint searches (the filter language has no OR), so a run started and ended since then is read once.
    """
    runs: dict[str, RunSnapshot] = {}
    since = int(since_ms)
    for flt in (f"attributes.start_time >= {since}",
                f"attributes.start_time < {since} AND attributes.end_time >= {since}",
                f"attributes.start_time < {since} AND attributes.status = 'RUNNING'"):
        runs.update(list_runs(client, experiment_ids, flt))
    for run_id in also:
        if run_id not in runs:
            try:
                run = client.get_run(run_id)
            except Exception as exc:  # deleted for good in between; the deletion pass decides
                log.debug("run %s not readable: %s", run_id, exc)
                continue
            if run.info.lifecycle_stage == "active" and str(run.info.experiment_id) in experiment_ids:
                runs[run_id] = _snapshot(run)
    return runs


def metric_history(client, run_id: str, key: str) -> list[MetricPoint]:
    return [MetricPoint(float(m.value), int(m.step), int(m.timestamp))
            for m in client.get_metric_history(run_id, key)]


#: Artifact listings in flight at once: a remote store answers each in tens of milliseconds, mostly waiting.
LIST_WORKERS = 16


def list_artifacts(artifact_uri: str, store_uri: str | None = None) -> list[tuple[str, bool, int | None]]:
    """``(path, is_dir, file_size)`` of every artifact under ``artifact_uri``, directories included."""
    return manifest.list_tree(artifact_repository(artifact_uri, store_uri))


def list_artifacts_of_runs(runs: list[tuple[str, str]], store_uri: str | None, workers: int = LIST_WORKERS
                           ) -> tuple[dict[str, list[tuple[str, bool, int | None]]], dict[str, Exception]]:
    """Artifact listings of ``(run_id, artifact_uri)`` pairs, ``workers`` runs at a time.

    Returns:
        ``(listings, errors)``: the listing of every run that could be listed, and the error of every other.
    """
    from concurrent.futures import ThreadPoolExecutor

    listings: dict[str, list[tuple[str, bool, int | None]]] = {}
    errors: dict[str, Exception] = {}
    if not runs:
        return listings, errors

    def one(item: tuple[str, str]):
        try:
            return item[0], list_artifacts(item[1], store_uri), None
        except Exception as exc:  # one unreachable run must not stop the others
            return item[0], None, exc

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(runs)))) as pool:
        for run_id, listing, exc in pool.map(one, runs):
            if exc is None:
                listings[run_id] = listing
            else:
                errors[run_id] = exc
    return listings, errors
