"""Build or update the DuckDB run index of an MLflow store.

Each call lists the store's active runs page by page (or, in a quick update, only those that can have changed),
compares every run's fingerprint with the one stored in the index, and fetches metric histories and artifact
listings only for runs that changed (within them, only histories of metrics whose latest point moved, and artifact
listings only of runs without a usable manifest, see ``tracking.manifest``). Runs that left the store leave the
index. The update is written to a copy of the index file that replaces the original in one rename, so a reader (the
leaderboard) sees either the old or the new index, never a half-written one; a lock file keeps two builders from
racing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from countboard.index import ddl, source
from countboard.index.reader import connect_readonly
from countboard.index.source import Listing, RunSnapshot
from countboard.index.updates import CLOCK_SKEW_MS, SCAN_EVERY_S, UPDATES
from countboard.tracking import address, failpoints, manifest
from countboard.tracking.relocate import RUN_DEPTH, store_folder, store_relative
from countboard.tracking.store import Tracker

log = logging.getLogger(__name__)


@dataclass
class IndexStats:
    """What one ``build_index`` call did."""

    db_path: Path
    runs: int = 0
    added: int = 0
    updated: int = 0
    removed: int = 0
    histories_fetched: int = 0
    artifacts_listed: int = 0
    mode: str = "scan"
    rebuilt: bool = False
    written: bool = False
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    damaged: int | None = None  # runs whose files differ from their manifest (``audit=True``)

    def summary(self) -> str:
        what = "rebuilt" if self.rebuilt else ("updated" if self.written else "unchanged")
        what += "" if self.rebuilt else f" ({self.mode})"
        return (f"index {what}: {self.runs} runs ({self.added} added, {self.updated} updated, {self.removed} removed,"
                f" {self.histories_fetched} metric histories read, {self.artifacts_listed} runs' artifacts listed)"
                f" in {self.seconds:.1f}s -> {self.db_path}"
                + ("" if self.damaged is None else f"; {self.damaged} runs whose files differ from their manifest"))


@dataclass
class _Previous:
    fingerprints: dict[str, str] = field(default_factory=dict)
    experiment_of: dict[str, str] = field(default_factory=dict)
    end_of: dict[str, int | None] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    latest: pd.DataFrame | None = None  # latest points of the changed runs (``source.METRIC_COLUMNS``)
    schema_hash: str = ""
    listed_ms: int = 0
    scanned_ms: int = 0
    marks: dict | None = None  # an SQLite store's rowid marks at the last listing written (``source.store_marks``)


def _schema_hash() -> str:
    from countboard.schema import load_schema

    s = load_schema()
    doc = {"m": sorted((k, vars(v)) for k, v in s.metrics.items()),
           "f": sorted((k, vars(v)) for k, v in s.families.items())}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _read_previous(db_path: Path, store_uri: str) -> _Previous | None:
    """State of an existing index, or None when it must be rebuilt (absent, other version, other store)."""
    if not db_path.exists():
        return None
    try:
        con = connect_readonly(db_path)
    except duckdb.Error as exc:
        log.warning("index %s cannot be opened (%s); rebuilding it", db_path, exc)
        return None
    try:
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("schema_version") != str(ddl.SCHEMA_VERSION) or meta.get("store_uri") != store_uri:
            log.info("index %s has schema %s of store %s; rebuilding for schema %s of %s", db_path,
                     meta.get("schema_version"), meta.get("store_uri"), ddl.SCHEMA_VERSION, store_uri)
            return None
        prev = _Previous(schema_hash=meta.get("schema_hash", ""), listed_ms=int(meta.get("listed_ms", 0)),
                         scanned_ms=_read_scanned(db_path, store_uri), marks=_marks(meta.get("store_marks")))
        # column by column: no Python tuple per run (300,000 of them in a lab's year)
        cols = con.execute("SELECT run_id, fingerprint, experiment_id, epoch_ms(end_time) AS end_ms, "
                           "status = 'RUNNING' AS running FROM runs").fetchnumpy()
        ids = cols["run_id"].tolist()
        prev.fingerprints = dict(zip(ids, cols["fingerprint"].tolist(), strict=True))
        prev.experiment_of = dict(zip(ids, cols["experiment_id"].tolist(), strict=True))
        ends = np.ma.asarray(cols["end_ms"])  # masked where end_time is NULL
        prev.end_of = dict(zip(ids, [None if m else int(v) for v, m in zip(
            ends.filled(0).tolist(), np.ma.getmaskarray(ends).tolist(), strict=True)], strict=True))
        prev.running = {r for r, run in zip(ids, cols["running"].tolist(), strict=True) if run}
        return prev
    except duckdb.Error as exc:
        log.warning("index %s is not readable as schema %s (%s); rebuilding it", db_path, ddl.SCHEMA_VERSION, exc)
        return None
    finally:
        con.close()


def _marks(text: str | None) -> dict | None:
    try:
        marks = json.loads(text) if text else None
    except ValueError:
        return None
    return marks if isinstance(marks, dict) else None


def _scan_file(db_path: Path) -> Path:
    return db_path.with_name(f"{db_path.name}.scanned")


def _read_scanned(db_path: Path, store_uri: str) -> int:
    """When the index last compared every run of ``store_uri`` (epoch ms; 0 when unknown).

    Kept beside the index rather than in it: a scan that finds nothing changed leaves the index file untouched.
    """
    try:
        doc = json.loads(_scan_file(db_path).read_text())
        return int(doc["scanned_ms"]) if doc.get("store_uri") == store_uri else 0
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _write_scanned(db_path: Path, store_uri: str, listed_ms: int) -> None:
    path = _scan_file(db_path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"store_uri": store_uri, "scanned_ms": listed_ms}))
    os.replace(tmp, path)


def _latest_points(db_path: Path, run_ids: list[str]) -> pd.DataFrame:
    """Latest metric points the index holds for ``run_ids`` (to tell which histories moved)."""
    if not run_ids:
        return source.metrics_frame()
    con = connect_readonly(db_path)
    try:
        frame = con.execute("SELECT run_id, key, value, step, epoch_ms(timestamp) AS timestamp FROM metrics "
                            "WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [run_ids]).df()
    finally:
        con.close()
    return source.metrics_frame(frame)


@contextlib.contextmanager
def _lock(db_path: Path):
    with open(f"{db_path}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _client(store_uri: str):
    # one pooled connection per parallel artifact listing (MLflow keeps 10 and drops the rest after each use)
    os.environ.setdefault("MLFLOW_HTTP_POOL_MAXSIZE", str(2 * source.LIST_WORKERS))
    tracker = Tracker(store_uri, client_uri=address.parse(store_uri).client_uri)  # a read-only store: immutable
    tracker.check()  # one line naming the store when it cannot be read (a down server: within seconds)
    return tracker.client


def build_index(store_uri: str, db_path: str | os.PathLike, *, full: bool = False, update: str = "auto",
                scan_every_s: float = SCAN_EVERY_S, history: str = "stepped", list_artifacts: bool = False,
                client=None, audit: bool = False) -> IndexStats:
    """Bring the index at ``db_path`` up to date with the store at ``store_uri``.

    Args:
        store_uri: MLflow tracking URI.
        db_path: The DuckDB file (created if missing).
        full: Ignore the existing index and rebuild it from the store.
        update: How an existing index is brought up to date. ``"scan"`` lists every run of the store and compares
            fingerprints: it sees every change, including later edits of runs that had already ended (a tag set
            in the MLflow UI, a metric logged into an ended run). ``"quick"`` lists only runs started or ended
            since the last index, running runs and deleted runs (see ``_diff``): what a sweep changes, read in a
            fraction of the time on a large store, but not those later edits. ``"auto"`` (the default) is quick
            unless the last scan is older than ``scan_every_s``, so later edits show within that time.
        scan_every_s: See ``update``.
        list_artifacts: List the artifacts of every run read, even those with a manifest (``tracking.manifest``);
            with ``full``, the way to bring in files that other tools logged into runs after they ended.
        history: ``"stepped"`` reads the full history of metrics whose latest point has a step > 0 (curves) and
            records a metric logged at step 0 (a summary) by its latest point, which saves one store call per
            metric and run; ``"all"`` reads every history (repeated step-0 values included).
        client: An ``MlflowClient`` to use instead of one built from ``store_uri``.
        audit: Also compare every ended run's files with its artifact manifest (``tracking.audit``, as
            ``countboard doctor`` does): the count in ``damaged``, each run in ``warnings``.

    Returns:
        What was done, with counts.
    """
    if history not in ("stepped", "all"):
        raise ValueError(f"history={history!r}: use 'stepped' or 'all'")
    if update not in UPDATES:
        raise ValueError(f"update={update!r}: use one of {', '.join(UPDATES)}")
    t0 = time.perf_counter()
    db_path = Path(db_path).expanduser().resolve()
    db_path.parent.mkdir(parents=True, exist_ok=True)
    stats = IndexStats(db_path=db_path)
    client = client or _client(store_uri)
    with _lock(db_path):
        _remove_stale_copies(db_path)
        prev = None if full else _read_previous(db_path, store_uri)
        stats.rebuilt = prev is None
        prev = prev or _Previous()
        listed_ms = int(time.time() * 1000)
        if stats.rebuilt:
            update = "scan"
        elif update == "auto":
            update = "quick" if listed_ms - prev.scanned_ms < scan_every_s * 1000 else "scan"
        experiments = source.list_experiments(client)
        current, changed, removed, update = _diff(client, prev, [str(e.experiment_id) for e in experiments],
                                                  stats.rebuilt, update == "quick", store_uri)
        stats.mode = update
        stats.runs = len(current)
        stats.added = sum(rid not in prev.fingerprints for rid in changed.runs)
        stats.updated = len(changed.runs) - stats.added
        stats.removed = len(removed)
        schema_hash = _schema_hash()
        # a scan that found nothing else to change records the store's marks when the index has none that hold,
        # so that the next quick update can tell what was written since
        new_marks = update == "scan" and changed.marks is not None and changed.marks != prev.marks
        if changed.runs or removed or stats.rebuilt or schema_hash != prev.schema_hash or new_marks:
            if not stats.rebuilt:
                prev.latest = _latest_points(db_path, [r for r in changed.runs if r in prev.fingerprints])
            frames = _details(client, store_uri, changed, prev, stats, history, list_artifacts)
            _write(db_path, store_uri, schema_hash, experiments, changed, removed, frames,
                   incremental=not stats.rebuilt, listed_ms=listed_ms, marks=changed.marks,
                   all_views=stats.rebuilt or schema_hash != prev.schema_hash)
            stats.written = True
        if update == "scan":
            _write_scanned(db_path, store_uri, listed_ms)
    if audit:
        _audit(store_uri, client, stats)
    stats.seconds = time.perf_counter() - t0
    return stats


def _audit(store_uri: str, client, stats: IndexStats) -> None:
    from countboard.tracking import audit

    tracker = Tracker(store_uri, client_uri=address.parse(store_uri).client_uri)
    tracker._client = client
    damaged = audit.damaged_runs(tracker)
    stats.damaged = len(damaged)
    stats.warnings += [f"{d.line()} (differs from its artifact manifest; `countboard doctor --fix` marks it for "
                       "recompute)" for d in damaged]


def _diff(client, prev: _Previous, experiment_ids: list[str], rebuild: bool, quick: bool,
          store_uri: str | None = None) -> tuple[set[str], Listing, list[str], str]:
    """(ids of all active runs, the listing of the runs to (re)index, ids to drop, ``"scan"`` or ``"quick"``: what
    was done).

    By default every active run is listed and compared by fingerprint; runs no longer listed are dropped. A quick
    update lists only runs that can have changed since the last listing, runs still running and runs that were
    running then; deletions come from the store's deleted runs and from experiments that are no longer active.
    Of an SQLite store, what changed is told by its rowids (``source.list_runs_sqlite``), never by a clock: runs
    created since, and runs with a metric, tag or param row written since, whatever the clock of the host that
    wrote them; when the rows the last listing marked have moved (``mlflow gc``, ``VACUUM``) the update is a scan.
    Of a server, the runs started or ended since the last listing by our clock, less ``CLOCK_SKEW_MS``: a writer
    whose clock is further behind is seen by the next scan. A quick update misses edits in place of runs that
    had already ended (a tag's value changed from the UI, a run restored from deleted; of a server, also a metric
    logged into a finished run) and runs deleted for good by ``mlflow gc``.
    """
    folder = store_folder(store_uri)

    def to_read(listed: Listing) -> Listing:
        for r in listed.runs.values():  # where a copied or moved local store keeps them now (``tracking.relocate``)
            if folder is not None and r.artifact_uri:
                r.artifact_uri = store_relative(r.artifact_uri, folder, RUN_DEPTH)
        if not prev.fingerprints:
            return listed
        return listed.only([rid for rid, r in listed.runs.items() if prev.fingerprints.get(rid) != r.fingerprint
                            or rid in prev.running or r.status == "RUNNING"])

    def scan() -> tuple[set[str], Listing, list[str], str]:
        listed = source.list_runs(client, experiment_ids, store_uri=store_uri)
        return set(listed.runs), to_read(listed), sorted(set(prev.fingerprints) - set(listed.runs)), "scan"

    if rebuild or not quick:
        return scan()
    since = prev.listed_ms - CLOCK_SKEW_MS
    # runs that were running, and runs whose artifacts could not be listed last time (empty fingerprint)
    retry = prev.running | {rid for rid, fp in prev.fingerprints.items() if not fp}
    try:
        listed = source.list_changed_runs(client, experiment_ids, since, sorted(retry), store_uri=store_uri,
                                          marks=prev.marks)
    except source.MarksMoved:
        log.info("the store's rows have moved since the last index (or it has no marks): comparing every run")
        return scan()
    deleted = source.deleted_run_ids(client, experiment_ids, store_uri) if prev.fingerprints else set()
    active_exps = set(experiment_ids)
    removed = sorted(rid for rid, exp in prev.experiment_of.items()
                     if (rid in deleted or exp not in active_exps) and rid not in listed.runs)
    current = (set(prev.fingerprints) - set(removed)) | set(listed.runs)
    return current, to_read(listed), removed, "quick"


def _ms(values) -> pd.Series:
    return pd.to_datetime(pd.Series(values, dtype="Int64"), unit="ms")


def _points_frame(points: pd.DataFrame) -> pd.DataFrame:
    """A metrics frame (``source.METRIC_COLUMNS``, epoch ms) as the index's ``metrics`` rows."""
    points = points.reset_index(drop=True)
    return pd.DataFrame({"run_id": points["run_id"], "key": points["key"], "value": points["value"],
                         "step": points["step"], "timestamp": pd.to_datetime(points["timestamp"], unit="ms")})


def _key_values(runs: list[RunSnapshot], name: str) -> pd.DataFrame:
    """The ``params`` or ``tags`` rows of ``runs`` (the artifact manifest becomes `artifacts` rows, not tags)."""
    ids, keys, values = [], [], []
    for r in runs:
        d = getattr(r, name)
        if name == "tags" and any(manifest.is_manifest_tag(k) for k in d):
            d = {k: v for k, v in d.items() if not manifest.is_manifest_tag(k)}
        ids.extend([r.run_id] * len(d))
        keys.extend(d)
        values.extend(d.values())
    return pd.DataFrame({"run_id": ids, "key": keys, "value": values}, dtype=object)


def _manifest_listing(run: RunSnapshot, prev: _Previous) -> list | None:
    """The run's artifacts from its manifest, when it may be used: for a run new to the index, or one whose end
    time moved since the last index (it has just ended). A run that changed while its end time stayed was edited
    after it ended, and what an edit added may be in no manifest: it is listed."""
    if run.run_id in prev.fingerprints and prev.end_of.get(run.run_id) == run.end_time:
        return None
    return manifest.decode(run.tags, run.status, run.end_time)


def _details(client, store_uri: str, changed: Listing, prev: _Previous, stats: IndexStats,
             history: str, list_all: bool = False) -> dict[str, pd.DataFrame]:
    """Rows of every per-run table for the changed runs (histories only for metrics that moved)."""
    snaps = list(changed.runs.values())
    runs = pd.DataFrame([r.row() for r in snaps], columns=ddl.columns("runs"))
    kv = {name: _key_values(snaps, name) for name in ("params", "tags")}
    latest = changed.metrics
    first = not prev.fingerprints  # a new index: no history to compare with or to delete
    moved = latest
    if not first and prev.latest is not None and not prev.latest.empty:
        # a metric whose latest point is the one indexed, of a run that is not running and was not, kept its history
        same = latest.merge(prev.latest, on=source.METRIC_COLUMNS, how="left", indicator=True)["_merge"].eq("both")
        live = {rid for rid, r in changed.runs.items() if r.status == "RUNNING" or rid in prev.running}
        keep = same.to_numpy() & ~latest["run_id"].isin(live).to_numpy()
        moved = latest[~keep]
    refetch = pd.DataFrame(columns=["run_id", "key"], dtype=object) if first else moved[["run_id", "key"]]
    stepped = moved if history == "all" else moved[moved["step"] > 0]
    fetched = [(rid, key, p.value, p.step, p.timestamp) for rid, key in zip(stepped["run_id"], stepped["key"],
                                                                         strict=True)
               for p in source.metric_history(client, rid, key)]
    # a summary metric, logged at step 0: its latest point is its history
    summary = moved.iloc[0:0] if history == "all" else moved[moved["step"] <= 0]
    stats.histories_fetched = len(stepped)
    points = summary if not fetched else pd.concat(
        [summary, source.metrics_frame(pd.DataFrame(fetched, columns=source.METRIC_COLUMNS))], ignore_index=True)
    artifacts, unlisted = [], set()
    # runs that ended through Countboard carry their listing (``tracking.manifest``); only the others are listed
    listings = {} if list_all else {r.run_id: m for r in snaps if (m := _manifest_listing(r, prev)) is not None}
    listed, errors = source.list_artifacts_of_runs(
        [(r.run_id, r.artifact_uri) for r in snaps if r.run_id not in listings], store_uri)
    listings.update(listed)
    stats.artifacts_listed = len(listed) + len(errors)
    for run in snaps:
        if run.run_id in errors:  # an unreachable artifact store must not stop the index
            msg = f"artifacts of run {run.run_id} at {run.artifact_uri} not listed: {errors[run.run_id]}"
            log.warning(msg)
            stats.warnings.append(msg)
            unlisted.add(run.run_id)
        else:
            artifacts.extend((run.run_id, *a) for a in listings[run.run_id])
    # An empty fingerprint never matches, so the next index retries the runs whose artifacts were not listed.
    runs.loc[runs["run_id"].isin(unlisted), "fingerprint"] = ""
    runs["start_time"] = _ms(runs["start_time"])
    runs["end_time"] = _ms(runs["end_time"])
    metrics = _points_frame(latest)
    return {
        "runs": runs, **kv, "metrics": metrics,
        "metric_history": metrics if points is latest else _points_frame(points),
        "refetch": refetch.astype(object),
        "artifacts": pd.DataFrame(artifacts, columns=["run_id", "path", "is_dir", "file_size"]).astype(
            {"run_id": object, "path": object, "is_dir": bool, "file_size": "Int64"}),
    }


def _write(db_path: Path, store_uri: str, schema_hash: str, experiments: list, changed: Listing,
           removed: list[str], frames: dict[str, pd.DataFrame], *, incremental: bool, listed_ms: int,
           marks: dict | None = None, all_views: bool = True) -> None:
    """Apply the changes to a copy of the index in one transaction, then swap the copy in (``all_views``: rebuild
    every family's tables, else only those of the families of the changed and removed runs)."""
    tmp = db_path.with_name(f"{db_path.name}.tmp-{os.getpid()}")
    _remove(tmp)
    if incremental:
        shutil.copyfile(db_path, tmp)
    try:
        con = duckdb.connect(str(tmp))
        try:
            for stmt in ddl.create_tables_sql():
                con.execute(stmt)
            con.execute("BEGIN TRANSACTION")
            _apply(con, store_uri, schema_hash, experiments, changed, removed, frames, listed_ms, marks, all_views)
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        failpoints.hit("index_build")
        os.replace(tmp, db_path)
    finally:
        _remove(tmp)


def _remove_stale_copies(db_path: Path) -> None:
    """Copies left by a builder that was killed while writing (we hold the lock: no builder is writing now)."""
    for stale in [*db_path.parent.glob(f"{db_path.name}.tmp-*"), *db_path.parent.glob(f"{db_path.name}.scanned.tmp-*")]:
        log.info("removing %s, left by an index build that was stopped", stale)
        stale.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    for p in (path, Path(f"{path}.wal")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _apply(con, store_uri: str, schema_hash: str, experiments: list, changed: Listing,
           removed: list[str], frames: dict[str, pd.DataFrame], listed_ms: int, marks: dict | None = None,
           all_views: bool = True) -> None:
    # the runs whose rows go: those of the changed runs the index holds, and the removed ones
    held = [r for (r,) in con.execute("SELECT run_id FROM runs WHERE run_id IN (SELECT unnest(?::VARCHAR[]))",
                                      [list(changed.runs) + list(removed)]).fetchall()]
    stale = pd.DataFrame({"run_id": pd.Series(held, dtype=object)})
    gone = pd.DataFrame({"run_id": pd.Series(list(removed), dtype=object)})
    con.register("stale_runs", stale)
    # the families whose tables change: those the changed and removed runs had, and those they have now
    affected = None if all_views else (
        {f for (f,) in con.execute("SELECT DISTINCT family FROM runs WHERE family IS NOT NULL AND run_id IN "
                                   "(SELECT run_id FROM stale_runs)").fetchall()}
        | set(frames["runs"]["family"].dropna()))
    con.register("gone_runs", gone)
    con.register("refetch_keys", frames["refetch"])
    for table in ddl.PER_RUN_TABLES:
        if table == "metric_history" and held:
            con.execute("DELETE FROM metric_history WHERE run_id IN (SELECT run_id FROM gone_runs)")
            con.execute("DELETE FROM metric_history h USING refetch_keys f WHERE h.run_id = f.run_id AND h.key = f.key")
        elif held:  # (new runs only: nothing to delete, no table to read through)
            con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM stale_runs)")
        con.register("new_rows", frames[table])
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM new_rows")
        con.unregister("new_rows")
    for name in ("gone_runs", "refetch_keys"):
        con.unregister(name)
    exps = pd.DataFrame([(str(e.experiment_id), e.name, e.artifact_location, e.lifecycle_stage) for e in experiments],
                        columns=ddl.columns("experiments"), dtype=object)
    _replace(con, "experiments", exps)
    _write_schema(con)
    con.register("changed_runs", frames["runs"][["run_id"]])
    _write_views(con, affected)
    for name in ("stale_runs", "changed_runs"):
        con.unregister(name)
    meta = pd.DataFrame({"key": ["schema_version", "store_uri", "schema_hash", "indexed_at", "listed_ms",
                                 "store_marks"],
                         "value": [str(ddl.SCHEMA_VERSION), store_uri, schema_hash,
                                   time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), str(listed_ms),
                                   json.dumps(marks) if marks else ""]},
                        dtype=object)
    _replace(con, "meta", meta)


def _replace(con, table: str, frame: pd.DataFrame) -> None:
    con.execute(f"DELETE FROM {table}")
    con.register("new_rows", frame)
    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM new_rows")
    con.unregister("new_rows")


def _write_schema(con) -> None:
    from countboard.schema import load_schema

    s = load_schema()
    metrics = pd.DataFrame([(m.key, m.display, m.higher_is_better, m.family, m.fmt, m.description)
                            for m in s.metrics.values()], columns=ddl.columns("metric_info"))
    families = pd.DataFrame([(f.key, f.display, f.main_metric, f.description) for f in s.families.values()],
                            columns=ddl.columns("family_info"))
    _replace(con, "metric_info", metrics.astype({"higher_is_better": "boolean"}))
    _replace(con, "family_info", families)


def _write_views(con, only: set[str] | None = None) -> None:
    """One view per family: the schema's families and any family a run is tagged with (``only``: update the
    tables of these families and keep the others, which no run of theirs changed).

    A family's wide table is updated run by run when its columns stay the same: the rows of the runs in
    ``stale_runs`` (changed and removed) go, those of the changed runs that belong to it come (``changed_runs``),
    and ``is_latest`` is marked again; its seed cells are computed again from it. Either way the tables hold what
    a build from scratch gives.
    """
    from countboard.schema import load_schema

    s = load_schema()
    tagged = [f for (f,) in con.execute("SELECT DISTINCT family FROM runs WHERE family IS NOT NULL ORDER BY 1")
              .fetchall()]
    if only is None:
        for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall():
            con.execute(f"DROP VIEW IF EXISTS {ddl.quote_identifier(name)}")
        for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE starts_with(table_name, ?)",
                                   [ddl.WIDE_PREFIX]).fetchall():
            con.execute(f"DROP TABLE IF EXISTS {ddl.quote_identifier(name)}")
    else:  # a family tagged on runs only, whose last run left: its tables go
        for family in only - {*s.families, *tagged}:
            with contextlib.suppress(ValueError):
                con.execute(f"DROP VIEW IF EXISTS {ddl.view_name(family)}")
                con.execute(f"DROP VIEW IF EXISTS {ddl.cells_view_name(family)}")
                con.execute(f"DROP TABLE IF EXISTS {ddl.wide_table(family)}")
                con.execute(f"DROP TABLE IF EXISTS {ddl.wide_table(family + ddl.CELLS_SUFFIX)}")
    families = [f for f in dict.fromkeys([*s.families, *tagged]) if f != "engine" and (only is None or f in only)]
    present = con.execute("SELECT DISTINCT r.family, m.key FROM metrics m JOIN runs r USING (run_id) "
                          "WHERE r.family IN (SELECT unnest(?::VARCHAR[])) ORDER BY 2", [families]).fetchall()
    engine_keys = [m.key for m in s.metrics.values() if m.family == "engine"]
    for family in families:
        keys = [m.key for m in s.family_metrics(family)] + engine_keys + [k for f, k in present if f == family]
        usable = [k for k in dict.fromkeys(keys) if _usable(k, family)]
        try:
            view = ddl.view_name(family)
            table = ddl.wide_table(family)
            cells = ddl.wide_table(family + ddl.CELLS_SUFFIX)
            in_place = only is not None and _columns(con, table) == _wide_columns(usable) and _columns(con, cells)
            if in_place:
                # the cells the rows leaving belong to, and (below) those the rows coming belong to
                con.execute(f"CREATE OR REPLACE TEMP TABLE cell_groups AS SELECT DISTINCT {ddl.CELL_GROUP} AS g "
                            f"FROM {table} WHERE run_id IN (SELECT run_id FROM stale_runs)")
                con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM stale_runs)")
                _pivot(con, family, usable, "changed_runs")
                con.execute(f"INSERT INTO {table} BY NAME SELECT *, false AS {ddl.LATEST_COLUMN} FROM ("
                            f"{ddl.family_rows_sql(family, usable, 'pivoted', 'changed_runs')})")
                con.execute(ddl.latest_update_sql(table))
                con.execute(f"INSERT INTO cell_groups SELECT DISTINCT {ddl.CELL_GROUP} FROM {table} "
                            f"WHERE run_id IN (SELECT run_id FROM changed_runs)")
                con.execute(f"DELETE FROM {cells} WHERE replicate_hash IN (SELECT g FROM cell_groups)")
                with _one_thread(con):
                    con.execute(f"INSERT INTO {cells} BY NAME SELECT *, false AS {ddl.LATEST_COLUMN} FROM ("
                                f"{ddl.cells_rows_sql(family, usable, 'cell_groups')})")
                con.execute(ddl.latest_update_sql(cells))
                con.execute("DROP TABLE cell_groups")
            else:
                _pivot(con, family, usable)
                con.execute(ddl.family_table_sql(family, usable, "pivoted"))
                with _one_thread(con):
                    con.execute(ddl.cells_table_sql(family, usable))
            con.unregister("pivoted")
            con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {table}")
            con.execute(ddl.cells_view_sql(family))
        except ValueError as exc:
            log.warning("no view for family %r: %s", family, exc)


@contextlib.contextmanager
def _one_thread(con):
    """Aggregate on one thread: the seed cells' sums then add their rows in the order they are read
    (``ddl.cells_rows_sql``), the same in a table built at once and in one updated run by run."""
    (threads,) = con.execute("SELECT current_setting('threads')").fetchone()
    con.execute("SET threads = 1")
    try:
        yield
    finally:
        con.execute(f"SET threads = {int(threads)}")


def _wide_columns(keys: list[str]) -> list[str]:
    return [*ddl.RUNS_COLUMNS, *ddl.RUN_TAG_COLUMNS, ddl.FAILED_SHARE_COLUMN, "n_runs", *keys, ddl.LATEST_COLUMN]


def _columns(con, table: str) -> list[str]:
    name = table.strip('"')
    return [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                                      "AND database_name = current_database() ORDER BY column_index",
                                      [name]).fetchall()]


def _pivot(con, family: str, keys: list[str], only: str | None = None) -> None:
    """Register ``pivoted``: one row per run of the family's table (``ddl.family_rows_sql``; ``only``: of those
    runs), one column per metric key (``ddl.pivot_column``), NULL where the run has no such metric.

    The index's ``metrics`` rows (one per run and key) are placed into a runs × keys array at once: DuckDB's
    ``max(...) FILTER (...)`` per key reads every row once per key, which at 100 keys and 6,000 runs per family
    costs seconds per family.
    """
    import numpy as np
    import pyarrow as pa

    extra = [ddl.PIVOT_FAILED, ddl.PIVOT_SAMPLES]
    wanted = list(dict.fromkeys([*keys, *extra]))
    frame = con.execute(f"SELECT m.run_id, m.key, m.value FROM metrics m WHERE m.key IN "
                        f"(SELECT unnest(?::VARCHAR[])) AND m.run_id IN ({ddl.family_runs_sql(family, only)})",
                        [wanted]).df()
    run_codes, run_ids = pd.factorize(frame["run_id"])
    key_codes = pd.Categorical(frame["key"], categories=wanted).codes
    values = np.full((len(run_ids), len(wanted)), np.nan)
    missing = np.ones(values.shape, dtype=bool)
    values[run_codes, key_codes] = frame["value"].to_numpy("float64")
    missing[run_codes, key_codes] = False
    columns = {"run_id": pa.array(np.asarray(run_ids, dtype=object), pa.string())}
    for j, key in enumerate(wanted):
        column = pa.array(values[:, j], pa.float64(), mask=missing[:, j])
        if j < len(keys):
            columns[ddl.pivot_column(j)] = column
        if key in extra:
            columns[ddl.pivot_column(key)] = column
    con.register("pivoted", pa.table(columns))


def _usable(key: str, family: str) -> bool:
    try:
        ddl.quote_identifier(key)
    except ValueError:
        log.warning("metric %r is not snake_case: left out of the view of family %r (it stays in `metrics`)",
                    key, family)
        return False
    return True
