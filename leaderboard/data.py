"""The leaderboard's data: a cached read-only connection to the DuckDB index and the queries the pages run.

Nothing connects at import time. The connection and query results are cached per version of the index file
(inode, size and modification time), so a ``countboard index`` that swaps in a new file is picked up on the next
rerun. An index that cannot be read under a running board (damaged, truncated, deleted, locked by a writer, of
another schema) is one line on the page naming its path and the command that rebuilds it (``index_problem``,
``query``); the connection is dropped and the next rerun reads the file as it is then.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import streamlit as st

import queries
from countboard.errors import CountboardError
from countboard.escaping import md, md_code
from countboard.index import ddl, ui_address
from countboard.index.artifacts import (
    ArtifactPathError,
    fetch_artifact,
    relocate_artifact_uri,
)
from countboard.index.ddl import CELLS_SUFFIX, SPREAD_SUFFIX
from countboard.index.reader import connect_readonly, use_index
from countboard.protocol import DEFAULT_LABEL
from countboard.schema import FamilyInfo, IntervalInfo, MetricInfo, load_schema
from countboard.tracking import address
from countboard.tracking import tags as tg

DEFAULT_COLUMNS = 10
PARTIAL_COLUMN = "partial"  # the index's flag of runs over a subset of their cell (smoke runs)
PROTOCOL_COLUMN = tg.PROTOCOL_LABEL  # what a run measures beyond model, dataset and task (countboard.protocol)
FAILED_COLUMN = tg.N_FAILED_UNITS  # units of a run whose input could not be read or evaluated


def db_path() -> Path:
    """``$COUNTBOARD_INDEX_DB``, else ``--db PATH`` after ``--`` on the ``streamlit run`` line, else the default
    of the store (``countboard.tracking.address``)."""
    if os.environ.get(address.INDEX_DB_ENV):
        return Path(os.environ[address.INDEX_DB_ENV]).expanduser()
    argv = sys.argv[1:]
    if "--db" in argv and argv.index("--db") + 1 < len(argv):
        return Path(argv[argv.index("--db") + 1]).expanduser()
    return address.resolve().index_path()


def mlflow_ui() -> tuple[str, str]:
    """Base URL of the MLflow UI and why there: the store's running ``countboard mlflow-ui``, else the setting
    (``countboard.index.ui_address.ui_for``)."""
    try:
        uri = address.resolve().uri
    except (CountboardError, ValueError):  # no store named: the setting alone
        uri = None
    return ui_address.ui_for(uri)


def mlflow_ui_base() -> str:
    """Base URL of the MLflow UI the board links to."""
    return mlflow_ui()[0]


@st.cache_data(ttl=15, show_spinner=False)
def mlflow_ui_answers(url: str) -> bool:
    """Whether an MLflow UI answers at ``url`` (asked again after 15 s)."""
    return ui_address.answers(url, timeout_s=0.5)


def run_url(experiment_id: str, run_id: str) -> str:
    """Link to a run's page in the MLflow UI."""
    return ui_address.run_url(mlflow_ui_base(), experiment_id, run_id)


def run_urls(experiment_ids, run_ids) -> list[str]:
    """Links to several runs' pages, the UI's address found once (it reads the store's and the UI's files: 0.4 ms
    a call, 128 ms for the 870 entries of a ranking at 30,000 runs when asked per row)."""
    base = mlflow_ui_base()
    return [ui_address.run_url(base, e, r) for e, r in zip(experiment_ids, run_ids, strict=True)]


def compare_url(run_ids: list[str], experiment_ids: list[str]) -> str:
    """Link to the MLflow UI's comparison of several runs."""
    return ui_address.compare_url(mlflow_ui_base(), run_ids, experiment_ids)


#: What a query raises when the index file, not the query, is at fault: damaged or truncated bytes (DuckDB's base
#: ``Error`` for a block whose checksum does not match), a lock held by a writer, a file that is no DuckDB
#: database, missing tables of another schema. A query's own mistakes (``ParserException``, ``BinderException``…)
#: are not among them: they stay errors of the page.
_NOT_THE_INDEX = (duckdb.ParserException, duckdb.SyntaxException, duckdb.BinderException,
                  duckdb.NotImplementedException, duckdb.TypeMismatchException, duckdb.InvalidTypeException,
                  duckdb.ConversionException, duckdb.OutOfRangeException, duckdb.InterruptException)
_LOCKED = "could not set lock"
_KNOWN_STORES: dict[str, str] = {}  # index path -> the store it was last read from (for the rebuild command)
# index path -> (file version, line): a version whose reads failed (not for a lock, which its writer releases), so
# that its line stays on every page until the file changes, and pages stop trying to read it
_FAILED: dict[str, tuple[tuple[int, int, int], str]] = {}


def index_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the index file cannot be read (rather than a query being wrong)."""
    return isinstance(exc, duckdb.Error) and not isinstance(exc, _NOT_THE_INDEX)


def _version(path: Path) -> tuple[int, int, int] | None:
    """The file's identity (inode, size, modification time): a rebuild swapping in a new file, a file replaced,
    truncated or written over all change it, and with it every cache key below."""
    try:
        st_ = path.stat()
    except FileNotFoundError:
        return None
    return st_.st_ino, st_.st_size, st_.st_mtime_ns


def index_exists() -> bool:
    return _version(db_path()) is not None


@st.cache_data(max_entries=8, show_spinner=False)
def _index_meta(path: str, version: tuple[int, int, int]) -> dict[str, str]:
    """The index's ``meta`` table; raises (and caches nothing) when the file cannot be read, so a lock that is
    released or a file repaired under the same identity is read again on the next rerun."""
    cur = _connection(path, version).cursor()
    try:
        use_index(cur)
        return dict(cur.execute("SELECT key, value FROM meta").fetchall())
    finally:
        cur.close()


def rebuild_command(full: bool = True) -> str:
    """The ``countboard index`` line that rebuilds this board's index from its store: the store ``countboard
    leaderboard`` names (``$COUNTBOARD_STORE``), else the one the index was last read from, else the default."""
    path = db_path()
    store = os.environ.get(address.STORE_ENV) or _KNOWN_STORES.get(str(path))
    try:
        addr = address.parse(store) if store else address.resolve()
        where = str(addr.folder) if addr.is_embedded else addr.uri
    except (CountboardError, ValueError):
        where = store
    args = ["countboard", "index", *(["--full"] if full else []), *(["--store", where] if where else []),
            "--db", str(path)]
    return shlex.join(args)


def unreadable_line(path: Path, exc: BaseException) -> str:
    """One line for an index that cannot be read: where it is, what DuckDB said, the command that rebuilds it."""
    said = md(" ".join(str(exc).split())[:160])
    if _LOCKED in str(exc).lower():
        return (f"The index {md_code(path)} is locked by another process that writes it ({said}): this page reads "
                f"it again once that process ends; if none should be writing it, rebuild it with "
                f"{md_code(rebuild_command())}, then reload this page.")
    kind = type(exc).__name__
    return (f"The index {md_code(path)} cannot be read ({'' if kind == 'Error' else kind + ': '}{said}): rebuild it with "
            f"{md_code(rebuild_command())}, then reload this page.")


def _drop_connections() -> None:
    """Forget every open connection and cached answer: the next read opens the file as it is then."""
    _connection.clear()
    _index_meta.clear()


def index_problem() -> str | None:
    """Why the index cannot be read now (one line naming its path and the command that rebuilds it), None when
    it can be or when there is none (``index_exists``)."""
    path = db_path()
    version = _version(path)
    if version is None:
        return None
    failed = _FAILED.get(str(path))
    if failed and failed[0] == version:
        return failed[1]
    try:
        meta = _index_meta(str(path), version)
    except duckdb.Error as exc:
        _drop_connections()
        if isinstance(exc, duckdb.CatalogException):  # a DuckDB file without the index's tables
            meta = {}
        else:
            return unreadable_line(path, exc)
    if meta.get("store_uri"):
        _KNOWN_STORES[str(path)] = meta["store_uri"]
    found = meta.get("schema_version")
    if found != str(ddl.SCHEMA_VERSION):
        return (f"The index {md_code(path)} has schema version {md(found or 'unknown')}, this leaderboard reads "
                f"version {ddl.SCHEMA_VERSION}: rebuild it with {md_code(rebuild_command())} (or start "
                "`countboard leaderboard` without `--no-index`), then reload this page.")
    return None


def board_problem() -> str | None:
    """What stands between the board and its index now: ``missing_line`` or ``index_problem``, None when the
    index can be read."""
    return index_problem() if index_exists() else missing_line()


def missing_line() -> str:
    """One line for a board whose index file is not there (never built, or deleted under it)."""
    return (f"There is no index at {md_code(db_path())}: build it from the store with "
            f"{md_code(rebuild_command(full=False))}, then reload this page.")


@st.cache_resource(max_entries=2, show_spinner=False)
def _connection(path: str, version: tuple[int, int, int]):
    return connect_readonly(path)


@st.cache_data(max_entries=512, show_spinner=False)
def _query(path: str, version: tuple[int, int, int], sql: str, params: tuple) -> pd.DataFrame:
    cur = _connection(path, version).cursor()
    try:
        use_index(cur)
        return cur.execute(sql, list(params)).df()
    finally:
        cur.close()


def query(sql: str, params: tuple = ()) -> pd.DataFrame:
    """Rows of ``sql`` with bound ``params``; an empty frame when there is no index yet.

    When the index cannot be read (damaged, truncated, locked, replaced by a file of other tables under the page),
    the page shows the one line of ``index_problem`` in place of what it was drawing, and stops there; the
    connection is dropped, so the next rerun opens the file as it is then.
    """
    path = db_path()
    version = _version(path)
    if version is None or index_problem():
        return pd.DataFrame()
    try:
        return _query(str(path), version, sql, tuple(params))
    except duckdb.Error as exc:
        if not index_error(exc):
            raise
        _drop_connections()
        line = unreadable_line(path, exc)
        if _LOCKED not in str(exc).lower():
            _FAILED[str(path)] = (version, line)
        st.warning(line)
        st.stop()


# --- schema-driven helpers ------------------------------------------------------------------------------------


def family(key: str) -> FamilyInfo | None:
    return load_schema().families.get(key)


def family_title(key: str) -> str:
    fam = family(key)
    return fam.display if fam else key.replace("_", " ").capitalize()


def section_label(key: str) -> str:
    """A family's name in its page's section control (the schema's short ``section``, else its title)."""
    fam = family(key)
    return fam.section_label if fam else family_title(key)


def metric_display(key: str) -> str:
    info = load_schema().metrics.get(key)
    return info.display if info else key


def has_family_view(key: str) -> bool:
    df = query(queries.HAS_VIEW, (key,))
    return not df.empty and int(df.n.iloc[0]) > 0


def view_columns(key: str) -> list[str]:
    """Columns of the family's view (none when it has no view)."""
    if not has_family_view(key):
        return []
    return list(query(queries.VIEW_COLUMNS, (key,)).column_name)


def view_metrics(key: str) -> list[MetricInfo]:
    """Metrics of the family view that have values, in schema order; undeclared keys get neutral metadata."""
    from countboard.index.ddl import LATEST_COLUMN, VIEW_RUN_COLUMNS

    keys = [c for c in view_columns(key) if c not in VIEW_RUN_COLUMNS and c not in (LATEST_COLUMN, PARTIAL_COLUMN)]
    schema = load_schema()
    order = {k: i for i, k in enumerate(schema.metrics)}
    infos = [schema.metrics.get(k) or MetricInfo(key=k, display=k, higher_is_better=None, family=key) for k in keys]
    return sorted(infos, key=lambda m: (order.get(m.key, len(order)), m.key))


def interval_of(metric: MetricInfo, available: list[MetricInfo]) -> IntervalInfo | None:
    """The schema's interval of ``metric`` when both bounds are columns of the view, else None."""
    keys = {m.key for m in available}
    iv = metric.interval
    return iv if iv is not None and iv.low in keys and iv.high in keys else None


def default_columns(key: str, available: list[MetricInfo]) -> list[MetricInfo]:
    """The family's schema ``columns`` (else its main metric and first metrics with a direction) that the view
    has."""
    fam = family(key)
    have = {m.key: m for m in available}
    if fam and fam.columns:
        picked = [have[k] for k in fam.columns if k in have]
        if picked:
            return picked
    main = fam.main_metric if fam else None
    picked = [m for m in available if m.key == main]
    picked += [m for m in available if m.family == key and m.higher_is_better is not None and m.key != main]
    return picked[:DEFAULT_COLUMNS]


@dataclass(frozen=True)
class Filters:
    dataset: str | None = None
    split: str | None = None
    levels: tuple[tuple[str, str | None], ...] = ()  # (view column, value or None for all)
    include_partial: bool = False
    include_failed: bool = False  # runs with failed units of entries that have a clean run, shown apart


def has_partial_column(key: str) -> bool:
    return PARTIAL_COLUMN in view_columns(key)


def has_failed_runs(key: str) -> bool:
    """Whether a finished run of the family has failed units (then the page offers to show them apart)."""
    if FAILED_COLUMN not in view_columns(key):
        return False
    return bool(query(queries.failed_runs_count(key)).n.iloc[0])


def protocols(key: str) -> list[str]:
    """The protocols (``protocol_label``) of the family's runs, the default one first."""
    if PROTOCOL_COLUMN not in view_columns(key):
        return []
    labels = level_values(key, PROTOCOL_COLUMN)
    return sorted(labels, key=lambda label: (label != DEFAULT_LABEL, label))


def choices(key: str) -> pd.DataFrame:
    """Datasets and splits with finished runs of the family."""
    return query(queries.FAMILY_CHOICES, (key,))


def level_values(key: str, column: str) -> list[str]:
    """Values of a level column (e.g. the tasks) present in the family's view."""
    if column not in view_columns(key):
        return []
    return [str(v) for v in query(queries.level_values(key, column)).value]


def ranking(key: str, sort: MetricInfo, filters: Filters, latest_only: bool = True,
            columns: list[str] | None = None) -> pd.DataFrame:
    """Entries of family ``key`` best first by ``sort`` (its direction from the schema; unknown: descending).

    With ``latest_only`` one row per subject × dataset × split × evaluator, the latest run of each task merged (see
    ``queries.ranking``), or one row per task too when several tasks report ``sort`` or the task is a level;
    otherwise one row per run. ``columns``: the metric keys to fetch (None: all).
    """
    if not has_family_view(key):
        return pd.DataFrame()
    keys = [m.key for m in view_metrics(key)]
    reporting = query(queries.tasks_reporting(key, sort.key))
    by_task = not reporting.empty and int(reporting.n.iloc[0]) > 1
    partial = filters.include_partial and has_partial_column(key)
    failed = filters.include_failed and FAILED_COLUMN in view_columns(key)
    levels = tuple(c for c, _ in filters.levels)
    seeds = latest_only and f"{sort.key}{SPREAD_SUFFIX}" in view_columns(f"{key}{CELLS_SUFFIX}")
    sql = queries.ranking(key, sort.key, sort.higher_is_better is not False, latest_only, columns, keys, by_task,
                          levels=levels, include_partial=partial, seeds=seeds, include_failed=failed)
    params = (filters.dataset, filters.dataset, filters.split, filters.split,
              *(x for _, v in filters.levels for x in (v, v)))
    df = query(sql, params)
    if "run_ids" not in df:
        df["run_ids"] = [[r] for r in df.run_id]
    return df


def run_tag(run_ids: list[str], tag: str) -> dict[str, str]:
    """Value of tag ``tag`` per run that has it."""
    df = query(queries.TAG_VALUES, (tag, list(run_ids)))
    return dict(zip(df.run_id, df.value, strict=True)) if not df.empty else {}


def run_param(run_ids: list[str], key: str) -> dict[str, str]:
    """Value of param ``key`` per run that has it."""
    df = query(queries.PARAM_VALUES, (key, list(run_ids)))
    return dict(zip(df.run_id, df.value, strict=True)) if not df.empty else {}


def store_dirs() -> tuple[Path | None, Path | None]:
    """(the store's directory when it was indexed, where it is now).

    Now: ``$COUNTBOARD_STORE`` (set by ``countboard leaderboard``) when given; else, when the indexed directory is
    gone, the index's own folder (the index lives beside the store, so a store moved with its index is found).
    """
    indexed = address.local_folder(store_uri())
    if os.environ.get(address.STORE_ENV):
        return indexed, address.parse(os.environ[address.STORE_ENV]).folder
    if indexed is not None and not indexed.exists():
        return indexed, db_path().resolve().parent
    return indexed, indexed


# --- artifacts -----------------------------------------------------------------------------------------------


def artifacts(run_ids: list[str], prefix: str = "") -> pd.DataFrame:
    """Files of ``run_ids`` whose path starts with ``prefix``, as listed in the index."""
    return query(queries.ARTIFACTS_OF_RUNS, (list(run_ids), prefix))


def artifact_cache_dir() -> Path:
    """Where artifacts of a remote store are kept once downloaded: beside the index."""
    return db_path().expanduser().resolve().parent / "artifact_cache"


def store_uri() -> str | None:
    """The store the index was built from."""
    meta = query(queries.META)
    return dict(zip(meta.key, meta.value, strict=True)).get("store_uri") if not meta.empty else None


def open_indexed_store():
    """The store the index was built from, opened the way every command opens it (``open_store``), for the pages
    that write into its runs (annotations)."""
    from countboard.tracking.store import open_store

    uri = store_uri()
    if not uri:
        raise ValueError("the index names no store; build it again with `countboard index`")
    return open_store(uri)


def artifact_file(run_id: str, path: str) -> Path | None:
    """Local file of an indexed artifact (a remote store's is downloaded once through the store and cached),
    None if the run has no such artifact; an artifact listed but not readable is reported on the page."""
    rows = query(queries.ARTIFACT, (run_id, path))
    if rows.empty:
        return None
    uri = relocate_artifact_uri(rows.artifact_uri.iloc[0], *store_dirs())  # a local store moved with its index
    size = query(queries.ARTIFACTS_OF_RUNS, ([run_id], path)).query("path == @path").file_size
    try:
        local = fetch_artifact(store_uri() or "", uri, path, artifact_cache_dir(),
                               int(size.iloc[0]) if len(size) and pd.notna(size.iloc[0]) else None)
    except ArtifactPathError:
        return None
    except Exception as exc:  # the store is down or the file went away: say so instead of "no such artifact"
        st.warning(f"Artifact {md_code(path)} of run {md_code(run_id)} is listed in the index but could not be read "
                   f"from {md(uri)}: {type(exc).__name__}: {md(str(exc)[:300])}")
        return None
    return local if local.is_file() else None


@st.cache_data(max_entries=256, show_spinner=False)
def _read_parquet(path: str, mtime_ns: int) -> pd.DataFrame:
    return pd.read_parquet(path)


def read_table(run_id: str, path: str) -> pd.DataFrame | None:
    """A run's Parquet artifact as a DataFrame, None when it is missing."""
    local = artifact_file(run_id, path)
    if local is None:
        return None
    return _read_parquet(str(local), local.stat().st_mtime_ns)


@st.cache_data(max_entries=256, show_spinner=False)
def _read_npz(path: str, mtime_ns: int) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def read_arrays(run_id: str, path: str) -> dict[str, np.ndarray] | None:
    """A run's ``.npz`` artifact (no pickled objects), None when missing."""
    local = artifact_file(run_id, path)
    if local is None:
        return None
    return _read_npz(str(local), local.stat().st_mtime_ns)


def first_with(run_ids: list[str], path: str) -> str | None:
    """The first of ``run_ids`` that has the artifact ``path`` (an entry's runs, most recent first)."""
    have = set(artifacts(list(run_ids), path).query("path == @path").run_id) if run_ids else set()
    return next((r for r in run_ids if r in have), None)
