"""Tables and views of the DuckDB run index.

The index is derived data: when ``SCHEMA_VERSION`` changes, ``countboard index`` rebuilds it from the store. Views
are generated per family from ``countboard.schema`` and from the metric keys present in the index; their column
names cannot be bound as parameters, so every identifier that enters DDL passes ``quote_identifier`` (snake_case
only) and every value passes ``quote_literal`` (which accepts only the same characters).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from countboard.tracking import tags as tg

SCHEMA_VERSION = 7

TABLES: dict[str, str] = {
    "meta": "key VARCHAR PRIMARY KEY, value VARCHAR",
    "experiments": "experiment_id VARCHAR PRIMARY KEY, name VARCHAR, artifact_location VARCHAR, "
                   "lifecycle_stage VARCHAR",
    "runs": "run_id VARCHAR PRIMARY KEY, experiment_id VARCHAR, run_name VARCHAR, status VARCHAR, "
            "user_id VARCHAR, start_time TIMESTAMP, end_time TIMESTAMP, lifecycle_stage VARCHAR, "
            "artifact_uri VARCHAR, parent_run_id VARCHAR, is_sweep BOOLEAN, family VARCHAR, model VARCHAR, "
            "dataset VARCHAR, split VARCHAR, task VARCHAR, model_kind VARCHAR, generator VARCHAR, evaluator VARCHAR, "
            "config_hash VARCHAR, protocol VARCHAR, protocol_label VARCHAR, "
            "git_commit VARCHAR, fingerprint VARCHAR",
    "params": "run_id VARCHAR, key VARCHAR, value VARCHAR",
    "tags": "run_id VARCHAR, key VARCHAR, value VARCHAR",
    "metrics": "run_id VARCHAR, key VARCHAR, value DOUBLE, step BIGINT, timestamp TIMESTAMP",
    "metric_history": "run_id VARCHAR, key VARCHAR, value DOUBLE, step BIGINT, timestamp TIMESTAMP",
    "artifacts": "run_id VARCHAR, path VARCHAR, is_dir BOOLEAN, file_size BIGINT",
    "metric_info": "key VARCHAR PRIMARY KEY, display VARCHAR, higher_is_better BOOLEAN, family VARCHAR, "
                   "fmt VARCHAR, description VARCHAR",
    "family_info": "key VARCHAR PRIMARY KEY, display VARCHAR, main_metric VARCHAR, description VARCHAR",
}

# Tables holding one group of rows per run: replaced together when a run changes, dropped when it goes.
PER_RUN_TABLES = ("runs", "params", "tags", "metrics", "metric_history", "artifacts")

# Columns of ``runs`` every family view starts with.
RUNS_COLUMNS = ("run_id", "experiment_id", "run_name", tg.MODEL, tg.MODEL_KIND, tg.GENERATOR, tg.EVALUATOR,
                tg.DATASET, tg.SPLIT, tg.TASK, tg.CONFIG_HASH, tg.PROTOCOL, tg.PROTOCOL_LABEL, "start_time",
                "end_time", "parent_run_id")

# Columns from the engine's tags: ``partial`` (a subset of the cell's units: max_samples), ``n_units`` of
# ``total_units``, the ``seed``, the ``replicate_hash`` shared by the seeds of one cell, and ``n_failed_units``
# (units whose input could not be read or evaluated; for runs without the tag, the ``n_failed_samples`` metric).
RUN_TAG_COLUMNS = {tg.PARTIAL: "BOOLEAN", tg.N_UNITS: "BIGINT", tg.TOTAL_UNITS: "BIGINT", tg.SEED: "BIGINT",
                   tg.REPLICATE_HASH: "VARCHAR", tg.N_FAILED_UNITS: "BIGINT"}

# Share of the run's units that failed (``n_failed_units`` / ``n_units``), computed in the views.
FAILED_SHARE_COLUMN = "failed_share"

# Every non-metric column of a family view (and of its ``_cells`` view, which adds ``n_runs``).
VIEW_RUN_COLUMNS = (*RUNS_COLUMNS, *RUN_TAG_COLUMNS, FAILED_SHARE_COLUMN, "n_runs")

# Computed per row of a family view: the most recent complete (not partial) run of its entry, subject × dataset ×
# split × evaluator × task × protocol, preferring runs without failed units: a run with failed units is the entry
# only while no clean complete run exists. Partial runs (smoke runs) never have it, so they never rank unless a
# page asks for them.
LATEST_COLUMN = "is_latest"

# Suffix of the spread column of a metric in the ``_cells`` view (sample standard deviation over seeds).
SPREAD_SUFFIX = "__std"
CELLS_SUFFIX = "_cells"

_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def quote_identifier(name: str) -> str:
    """Double-quote a snake_case identifier; refuse anything else.

    Example:
        >>> quote_identifier("cnt_f1")
        '"cnt_f1"'
    """
    if not _IDENT.match(name):
        raise ValueError(f"{name!r} is not a snake_case identifier (letters, digits, underscores); metric and "
                         "family keys must be snake_case as declared in countboard/schema/*.yaml")
    return f'"{name}"'


def quote_literal(value: str) -> str:
    """Single-quote a snake_case key for use inside DDL (views cannot take bound parameters)."""
    quote_identifier(value)
    return f"'{value}'"


def columns(table: str) -> list[str]:
    """Column names of ``table`` in declaration order."""
    return [c.strip().split()[0] for c in TABLES[table].split(",")]


def create_tables_sql() -> list[str]:
    return [f"CREATE TABLE IF NOT EXISTS {name} ({cols})" for name, cols in TABLES.items()]


def view_name(family: str) -> str:
    """The view of ``family`` is named after it; a family named like a table would shadow it."""
    if family in TABLES:
        raise ValueError(f"family {family!r} has the name of an index table; rename the family in "
                         "countboard/schema/*.yaml")
    return quote_identifier(family)


WIDE_PREFIX = "wide_"


def wide_table(family: str) -> str:
    """The table that holds the view's rows, rebuilt at each index update (pivoting on every query is slow)."""
    return quote_identifier(WIDE_PREFIX + family)


_ENTRY = "coalesce(generator, model), dataset, split, evaluator, task, protocol"


def _tag_columns(runs_sql: str) -> str:
    """The engine's tags of the runs ``runs_sql`` selects, one column each (absent tags: NULL; ``partial``
    absent: false)."""
    cols = []
    for key, kind in RUN_TAG_COLUMNS.items():
        raw = f"max(value) FILTER (WHERE key = {quote_literal(key)})"
        if key == tg.PARTIAL:
            cols.append(f"coalesce({raw} = 'true', false) AS partial")
        else:
            cols.append(f"TRY_CAST({raw} AS {kind}) AS {key}")
    keys = ", ".join(quote_literal(k) for k in RUN_TAG_COLUMNS)
    return (f"SELECT run_id, {', '.join(cols)} FROM tags WHERE key IN ({keys}) "
            f"AND run_id IN ({runs_sql}) GROUP BY run_id")


#: Columns of the relation ``family_rows_sql`` reads the metric values from: ``m<i>`` holds the i-th metric key,
#: these two the metrics the failed share falls back on (runs without the engine's unit tags).
PIVOT_FAILED, PIVOT_SAMPLES = "n_failed_samples", "n_samples"


def pivot_column(i: int | str) -> str:
    return f"m{i}" if isinstance(i, int) else f"p_{i}"


def family_rows_sql(family: str, metric_keys: Iterable[str], pivoted: str, only: str | None = None) -> str:
    """One row per finished, non-sweep run of ``family``, one column per metric key (without ``is_latest``).

    Runs belong to a family by their ``family`` tag; runs still running, failed or killed stay out, so a sweep that
    is writing never shows half its metrics here. The metric values come from ``pivoted`` (``run_id`` and the
    ``pivot_column`` of each key: the index's ``metrics`` rows of the family's runs, one column per key, built by
    the builder at once for all of them); ``only`` names a relation of ``run_id`` that restricts the rows to
    those runs.
    """
    run_cols = ", ".join(f"r.{c}" for c in RUNS_COLUMNS)
    failed = f"coalesce(t.n_failed_units, CAST(p.{pivot_column(PIVOT_FAILED)} AS BIGINT), 0)"
    tag_cols = ", ".join("coalesce(t.partial, false) AS partial" if c == tg.PARTIAL
                         else f"{failed} AS n_failed_units" if c == tg.N_FAILED_UNITS else f"t.{c}"
                         for c in RUN_TAG_COLUMNS)
    share = (f"{failed} / nullif(coalesce(t.n_units, p.{pivot_column(PIVOT_FAILED)} + "
             f"p.{pivot_column(PIVOT_SAMPLES)}), 0) AS {FAILED_SHARE_COLUMN}")
    metric_cols = "".join(f",\n  p.{pivot_column(i)} AS {quote_identifier(k)}" for i, k in enumerate(metric_keys))
    where = (f"r.family = {quote_literal(family)} AND r.status = 'FINISHED' AND NOT r.is_sweep"
             + (f" AND r.run_id IN (SELECT run_id FROM {only})" if only else ""))
    return (f"SELECT {run_cols}, {tag_cols}, {share}, 1 AS n_runs{metric_cols}\n"
            f"FROM runs r LEFT JOIN {pivoted} p ON p.run_id = r.run_id\n"
            f"LEFT JOIN ({_tag_columns(f'SELECT run_id FROM runs r WHERE {where}')}) t ON t.run_id = r.run_id\n"
            f"WHERE {where}")


def family_runs_sql(family: str, only: str | None = None) -> str:
    """The ``run_id`` of the runs ``family_rows_sql`` makes rows of."""
    return (f"SELECT run_id FROM runs r WHERE r.family = {quote_literal(family)} AND r.status = 'FINISHED' "
            f"AND NOT r.is_sweep" + (f" AND r.run_id IN (SELECT run_id FROM {only})" if only else ""))


def family_table_sql(family: str, metric_keys: Iterable[str], pivoted: str) -> str:
    """The family's wide table (``family_rows_sql``) with ``is_latest``."""
    return _latest_marked_table(wide_table(family), family_rows_sql(family, metric_keys, pivoted))


def latest_update_sql(table: str) -> str:
    """Set ``is_latest`` of every row of ``table`` (a wide table whose rows changed) as ``_latest_marked_table``
    does."""
    return (f"UPDATE {table} SET {LATEST_COLUMN} = x.latest FROM (SELECT run_id, {_latest_expr()} AS latest "
            f"FROM {table}) x WHERE {table}.run_id = x.run_id AND {table}.{LATEST_COLUMN} IS DISTINCT FROM x.latest")


def _latest_expr() -> str:
    return (f"NOT partial AND row_number() OVER (PARTITION BY {_ENTRY} "
            f"ORDER BY partial, n_failed_units > 0, end_time DESC NULLS LAST, run_id) = 1")


def _latest_marked_table(table: str, select_sql: str) -> str:
    """``CREATE TABLE table`` of ``select_sql``'s rows with ``LATEST_COLUMN``: true on the most recent complete
    row of each entry, clean rows (no failed unit) before the others (partial rows never latest; ties broken by
    ``run_id``)."""
    return (f"CREATE OR REPLACE TABLE {table} AS\n"
            f"SELECT *, {_latest_expr()} AS {LATEST_COLUMN}\n"
            f"FROM (\n{select_sql})")


def cells_view_name(family: str) -> str:
    return quote_identifier(family + CELLS_SUFFIX)


#: The cell a row of a family's wide table belongs to (its ``replicate_hash`` in the cells table).
CELL_GROUP = "coalesce(replicate_hash, config_hash, run_id)"


def cells_rows_sql(family: str, metric_keys: Iterable[str], groups: str | None = None) -> str:
    """One row per cell of ``family`` (its seeds together): each metric's mean, its spread (``<key>__std``, NULL
    for one seed) and ``n_runs`` (without ``is_latest``; ``groups``: only the cells whose ``CELL_GROUP`` is in
    that relation's ``g``).

    Cells are grouped by ``replicate_hash`` (the config hash without the seed); runs logged before that tag
    existed form a cell each. A smoke run's subset is other data: it forms its own, partial, cell. The rows are
    read in ``CELL_GROUP``, ``run_id`` order, so that the floating-point sums behind means and spreads, read by
    one thread (``cells_threads``), take the same values however the wide table was written.
    """
    keys = list(metric_keys)
    firsts = ", ".join(f"arg_max({c}, end_time) AS {c}" for c in RUNS_COLUMNS if c not in ("end_time",))
    stats = "".join(f",\n  avg({quote_identifier(k)}) AS {quote_identifier(k)}"
                    f",\n  stddev_samp({quote_identifier(k)}) AS {quote_identifier(k + SPREAD_SUFFIX)}"
                    for k in keys if len(k + SPREAD_SUFFIX) <= 63)
    where = f" WHERE {CELL_GROUP} IN (SELECT g FROM {groups})" if groups else ""
    return (f"SELECT {firsts}, max(end_time) AS end_time, bool_or(partial) AS partial, "
            f"min(n_units) AS n_units, max(total_units) AS total_units, min(seed) AS seed, "
            f"sum(n_failed_units) AS n_failed_units, "
            f"sum(n_failed_units) / nullif(sum(n_units), 0) AS {FAILED_SHARE_COLUMN}, "
            f"{CELL_GROUP} AS replicate_hash, count(*) AS n_runs{stats}\n"
            f"FROM (SELECT * FROM {wide_table(family)}{where} ORDER BY {CELL_GROUP}, run_id) GROUP BY {CELL_GROUP}")


def cells_table_sql(family: str, metric_keys: Iterable[str]) -> str:
    """The family's cells table (``cells_rows_sql``), ``is_latest`` marking the most recent complete cell of
    each entry."""
    return _latest_marked_table(wide_table(family + CELLS_SUFFIX), cells_rows_sql(family, metric_keys))


def cells_view_sql(family: str) -> str:
    return f"CREATE OR REPLACE VIEW {cells_view_name(family)} AS SELECT * FROM {wide_table(family + CELLS_SUFFIX)}"


def family_view_sql(family: str) -> str:
    """The family's view, named after the family."""
    return f"CREATE OR REPLACE VIEW {view_name(family)} AS SELECT * FROM {wide_table(family)}"
