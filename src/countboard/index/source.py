"""Reading an MLflow store page by page through ``MlflowClient``, for the index builder."""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

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


#: Columns of a listing's metrics frame: each listed run's latest point of each metric (``timestamp`` in epoch ms).
METRIC_COLUMNS = ["run_id", "key", "value", "step", "timestamp"]


@dataclass
class RunSnapshot:
    """What one page of ``search_runs`` says about a run: info, tags and params (its latest metrics are rows of the
    listing's ``metrics`` frame, summed up here by ``metrics_digest``)."""

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
    metrics_digest: str = ""

    @functools.cached_property
    def fingerprint(self) -> str:
        """Changes whenever the status, end time, name, a tag, a param or a latest metric changes (computed once:
        read the snapshot's fields, do not change them)."""
        h = hashlib.sha256()
        for part in (self.status, self.end_time, self.run_name, self.lifecycle_stage, self.artifact_uri,
                     sorted(self.tags.items()), sorted(self.params.items()), self.metrics_digest):
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


@dataclass
class Listing:
    """Listed runs (by id) and their latest metrics, one row per run and metric (``METRIC_COLUMNS``).

    Metrics stay a frame, never one Python object per value: at 30,000 runs × 100 metrics that is 3 M points.
    """

    runs: dict[str, RunSnapshot]
    metrics: pd.DataFrame
    marks: dict | None = None  # of an SQLite store: its rowid marks as of the listing (``store_marks``)

    def __post_init__(self) -> None:
        digests = metric_digests(self.metrics)
        for rid, run in self.runs.items():
            run.metrics_digest = digests.get(rid, "")

    def only(self, run_ids) -> Listing:
        """The listing of ``run_ids`` (those listed)."""
        keep = [r for r in run_ids if r in self.runs]
        return Listing({r: self.runs[r] for r in keep}, self.metrics[self.metrics["run_id"].isin(keep)], self.marks)

    @staticmethod
    def join(parts: list[Listing]) -> Listing:
        """One listing of several; a run listed twice is taken from the last part that lists it."""
        runs: dict[str, RunSnapshot] = {}
        owner: dict[str, int] = {}
        for i, part in enumerate(parts):
            runs.update(part.runs)
            owner.update(dict.fromkeys(part.runs, i))
        frames = [p.metrics[p.metrics["run_id"].map(owner).eq(i)] for i, p in enumerate(parts)]
        return Listing(runs, metrics_frame(pd.concat(frames, ignore_index=True)) if frames else metrics_frame())


def metrics_frame(frame: pd.DataFrame | None = None, **columns) -> pd.DataFrame:
    """A metrics frame with the listing's column types (from ``frame`` or from ``columns``' sequences)."""
    out = pd.DataFrame(columns if frame is None else frame, columns=METRIC_COLUMNS)
    return out.astype({"run_id": "str", "key": "str", "value": "float64", "step": "int64", "timestamp": "int64"}
                      ).reset_index(drop=True)


def metric_digests(metrics: pd.DataFrame) -> dict[str, str]:
    """run id -> a digest of its latest metric points, independent of their order: the count and the sum (modulo
    2**64) of one 64-bit hash per point (key, value, step, timestamp), computed for all points at once."""
    if metrics.empty:
        return {}
    hashes = pd.util.hash_pandas_object(metrics[["key", "value", "step", "timestamp"]], index=False).to_numpy()
    codes, uniques = pd.factorize(metrics["run_id"])
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    with np.errstate(over="ignore"):
        sums = np.add.reduceat(hashes[order], starts)
    counts = np.diff(np.r_[starts, len(order)])
    return {rid: f"{n}:{int(h):016x}" for rid, n, h in zip(uniques[codes[order][starts]], counts, sums, strict=True)}


def _snapshot(run, points: list) -> RunSnapshot:
    info, data = run.info, run.data
    points.extend((info.run_id, m.key, float(m.value), int(m.step), int(m.timestamp)) for m in data._metric_objs)
    return RunSnapshot(run_id=info.run_id, experiment_id=str(info.experiment_id), run_name=info.run_name or "",
                       status=info.status, user_id=info.user_id or "", start_time=info.start_time,
                       end_time=info.end_time, lifecycle_stage=info.lifecycle_stage,
                       artifact_uri=info.artifact_uri or "", tags=dict(data.tags), params=dict(data.params))


def _listing(runs: dict[str, RunSnapshot], points: list) -> Listing:
    cols = list(zip(*points, strict=True)) if points else [[]] * len(METRIC_COLUMNS)
    return Listing(runs, metrics_frame(**dict(zip(METRIC_COLUMNS, cols, strict=True))))


def list_runs(client, experiment_ids: list[str], filter_string: str = "", deleted: bool = False,
              store_uri: str | None = None) -> Listing:
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
    points: list = []
    for i in range(0, len(experiment_ids), _EXPERIMENT_BATCH):
        batch, token = experiment_ids[i:i + _EXPERIMENT_BATCH], None
        while True:
            page = client.search_runs(batch, filter_string=filter_string, run_view_type=view, max_results=PAGE_SIZE,
                                      page_token=token,
                                      order_by=["attributes.start_time ASC", "attributes.run_id ASC"])
            for run in page:
                if run.data.tags.get(tg.ROLE) != tg.ROLE_LEASE:  # ownership claims, not results
                    runs[run.info.run_id] = _snapshot(run, points)
            token = page.token
            if not token:
                break
    return _listing(runs, points)


def sqlite_file(store_uri: str | None) -> str | None:
    """The database file of a ``sqlite:`` store (read directly by ``list_runs``), else None.

    Example:
        >>> sqlite_file("sqlite:////x/my%20store/mlflow.db"), sqlite_file("http://h:5000")
        ('/x/my store/mlflow.db', None)
    """
    from countboard.tracking.address import parse

    db = parse(store_uri).db if store_uri else None
    return str(db) if db is not None else None


#: The tables of an SQLite store whose rowids mark what a listing saw. SQLite gives a new row (these tables have no
#: INTEGER PRIMARY KEY) the rowid one above the largest, so while the largest marked row is still there, rows with a
#: larger rowid were written after the listing, whatever clock their writer had.
MARK_TABLES = ("runs", "metrics", "tags", "params")


def store_marks(con) -> dict[str, list]:
    """``table -> [rowid, run_uuid, key]`` of the last row of each of ``MARK_TABLES`` (``[0, None, None]`` when
    empty), read on an open SQLite connection."""
    out = {}
    for table in MARK_TABLES:
        key = "NULL" if table == "runs" else "key"
        row = con.execute(f"SELECT rowid, run_uuid, {key} FROM {table} ORDER BY rowid DESC LIMIT 1").fetchone()
        out[table] = list(row) if row else [0, None, None]
    return out


def marks_hold(con, marks: dict) -> bool:
    """Whether the rows ``marks`` name are still where they were: then every row written since has a larger rowid.
    False when one is gone or moved (``mlflow gc`` deleted it, a ``VACUUM`` renumbered the table): rowids may have
    been given again, and only a listing of every run tells what changed."""
    for table in MARK_TABLES:
        mark = marks.get(table)
        if not isinstance(mark, list) or len(mark) != 3:
            return False
        rowid, run_uuid, key = mark
        if not rowid:
            continue
        got = con.execute(f"SELECT run_uuid, {'NULL' if table == 'runs' else 'key'} FROM {table} WHERE rowid = ?",
                          [int(rowid)]).fetchone()
        if got is None or list(got) != [run_uuid, key]:
            return False
    return True


class MarksMoved(Exception):
    """The rows an index's marks name are no longer where they were (``marks_hold``)."""


def list_runs_sqlite(db_file: str, experiment_ids: list[str], deleted: bool = False, *,
                     written_after: dict | None = None, also: list[str] = (), since_ms: int | None = None
                     ) -> Listing:
    """``list_runs`` without a filter, read straight from the tables of an SQLite store: the same snapshots as
    ``MlflowClient.search_runs`` builds (info from ``runs``, tags, params, and each metric's latest point from
    ``latest_metrics``), without building MLflow's ORM objects and entities, which cost about 30 s per 10,000
    runs of 100 metrics; the metrics come as one frame, read in one statement. One read transaction, so a sweep
    writing meanwhile is seen before or after a write, never halfway. The listing carries the store's marks
    (``store_marks``) as of that transaction.

    ``written_after`` (marks of an earlier listing) lists only the active runs that can have changed since it, told
    by the store's own rowids, not by any clock: runs created since, runs with a metric, tag or param row written
    since, runs still running, runs in ``also``, and, as a hint for edits in place that write no new row (a tag
    rewritten when a run's files change), runs started or ended since ``since_ms`` by their own clocks. Raises
    ``MarksMoved`` when the marks do not hold (``marks_hold``).
    """
    from pathlib import Path

    from countboard.tracking.integrity import connect_ro

    con = connect_ro(Path(db_file))  # a read-only folder: opened immutable, nothing written
    con.isolation_level = None
    try:
        con.execute("BEGIN")
        if written_after is not None and not marks_hold(con, written_after):
            raise MarksMoved(db_file)
        marks = store_marks(con)
        con.execute("CREATE TEMP TABLE wanted (run_uuid TEXT PRIMARY KEY)")
        qmarks = ",".join("?" * len(experiment_ids))
        where = ""
        if written_after is not None:
            con.execute("CREATE TEMP TABLE moved (run_uuid TEXT PRIMARY KEY)")
            con.executemany("INSERT OR IGNORE INTO moved VALUES (?)", [(r,) for r in also])
            since = -1 if since_ms is None else int(since_ms)  # NULLs compare false
            con.execute("INSERT OR IGNORE INTO moved SELECT run_uuid FROM runs WHERE rowid > ? OR status = 'RUNNING' "
                        "OR start_time >= ? OR end_time >= ?", [int(written_after["runs"][0]), since, since])
            for table in MARK_TABLES[1:]:  # a range of rowids: read from the end of the table, whatever its size
                con.execute(f"INSERT OR IGNORE INTO moved SELECT DISTINCT run_uuid FROM {table} WHERE rowid > ?",
                            [int(written_after[table][0])])
            where = "AND run_uuid IN (SELECT run_uuid FROM moved)"
        con.execute(f"INSERT INTO wanted SELECT run_uuid FROM runs WHERE lifecycle_stage = ? "
                    f"AND CAST(experiment_id AS TEXT) IN ({qmarks}) {where}",
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
        rows = con.execute(
            "SELECT run_uuid, key, CASE WHEN is_nan THEN NULL ELSE value END, step, coalesce(timestamp, 0) "
            "FROM latest_metrics WHERE run_uuid IN (SELECT run_uuid FROM wanted)").fetchall()
        con.execute("ROLLBACK")
    finally:
        con.close()
    # NULL (is_nan) becomes NaN in the float column
    metrics = metrics_frame(pd.DataFrame.from_records(rows, columns=METRIC_COLUMNS, nrows=len(rows)))
    del rows
    keep = {rid: r for rid, r in runs.items() if r.tags.get(tg.ROLE) != tg.ROLE_LEASE}
    if len(keep) < len(runs):
        metrics = metrics[metrics["run_id"].isin(list(keep))].reset_index(drop=True)
    return Listing(keep, metrics, marks)


def deleted_run_ids(client, experiment_ids: list[str], store_uri: str | None = None) -> set[str]:
    """Ids of the deleted runs of ``experiment_ids`` (of an SQLite store: one query on ``runs``)."""
    if (db_file := sqlite_file(store_uri)) is None:
        return set(list_runs(client, experiment_ids, deleted=True).runs)
    from pathlib import Path

    from countboard.tracking.integrity import connect_ro

    con = connect_ro(Path(db_file))
    try:
        marks = ",".join("?" * len(experiment_ids))
        return {r for (r,) in con.execute(f"SELECT run_uuid FROM runs WHERE lifecycle_stage = 'deleted' AND "
                                          f"CAST(experiment_id AS TEXT) IN ({marks})",
                                          [str(e) for e in experiment_ids])}
    finally:
        con.close()


def list_changed_runs(client, experiment_ids: list[str], since_ms: int, also: list[str],
                      store_uri: str | None = None, marks: dict | None = None) -> Listing:
    """Active runs that may have changed since the last listing, and runs in ``also`` (runs that were running
    then).

    A ``sqlite:///`` ``store_uri`` is read directly, in one transaction, and what changed is told by the store's
    rowids since ``marks`` (``list_runs_sqlite``), so runs written by a host whose clock is off are found as soon
    as they are written (runs started or ended since ``since_ms`` too: edits in place write no new row); raises
    ``MarksMoved`` when there are no marks or they do not hold. A server is asked for
    the runs started or ended since ``since_ms`` or still running: three disjoint searches (the filter language
    has no OR), so a run started and ended since then is read once.
    """
    if (db_file := sqlite_file(store_uri)) is not None:
        if marks is None:
            raise MarksMoved(db_file)
        return list_runs_sqlite(db_file, experiment_ids, written_after=marks, also=also, since_ms=since_ms)
    since = int(since_ms)
    parts = [list_runs(client, experiment_ids, flt) for flt in (
        f"attributes.start_time >= {since}",
        f"attributes.start_time < {since} AND attributes.end_time >= {since}",
        f"attributes.start_time < {since} AND attributes.status = 'RUNNING'")]
    listed = Listing.join(parts)
    runs: dict[str, RunSnapshot] = {}
    points: list = []
    for run_id in also:
        if run_id not in listed.runs:
            try:
                run = client.get_run(run_id)
            except Exception as exc:  # deleted for good in between; the deletion pass decides
                log.debug("run %s not readable: %s", run_id, exc)
                continue
            if run.info.lifecycle_stage == "active" and str(run.info.experiment_id) in experiment_ids:
                runs[run_id] = _snapshot(run, points)
    return Listing.join([listed, _listing(runs, points)]) if runs else listed


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
