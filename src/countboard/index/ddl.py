"""Tables and views of the DuckDB run index.

The index is derived data: when ``SCHEMA_VERSION`` changes, ``countboard index`` rebuilds it from the store. Views
are generated per family from ``countboard.schema`` and from the metric keys present in the index; their column
names cannot be bound as parameters, so every identifier that enters DDL passes ``quote_identifier`` (snake_case
only) and every value passes ``quote_literal`` (which accepts only the same characters).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SCHEMA_VERSION = 4

TABLES: dict[str, str] = {
    "meta": "key VARCHAR PRIMARY KEY, value VARCHAR",
    "experiments": "experiment_id VARCHAR PRIMARY KEY, name VARCHAR, artifact_location VARCHAR, "
                   "lifecycle_stage VARCHAR",
    "runs": "run_id VARCHAR PRIMARY KEY, experiment_id VARCHAR, run_name VARCHAR, status VARCHAR, "
            "user_id VARCHAR, start_time TIMESTAMP, end_time TIMESTAMP, lifecycle_stage VARCHAR, "
            "artifact_uri VARCHAR, parent_run_id VARCHAR, is_sweep BOOLEAN, family VARCHAR, model VARCHAR, "
            "dataset VARCHAR, split VARCHAR, task VARCHAR, model_kind VARCHAR, generator VARCHAR, evaluator VARCHAR, "
            "config_hash VARCHAR, "
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
VIEW_RUN_COLUMNS = ("run_id", "experiment_id", "run_name", "model", "model_kind", "generator", "evaluator",
                    "dataset", "split", "task", "config_hash", "start_time", "end_time", "parent_run_id")

# Computed per row of a family view: the most recent run of its subject × dataset × split × evaluator × task.
LATEST_COLUMN = "is_latest"

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


def family_table_sql(family: str, metric_keys: Iterable[str]) -> str:
    """One row per finished, non-sweep run of ``family``, one column per metric key, and ``is_latest``.

    Runs belong to a family by their ``family`` tag; runs still running, failed or killed stay out, so a sweep that
    is writing never shows half its metrics here.
    """
    run_cols = ", ".join(f"r.{c}" for c in VIEW_RUN_COLUMNS)
    metric_cols = "".join(
        f",\n  max(m.value) FILTER (WHERE m.key = {quote_literal(k)}) AS {quote_identifier(k)}"
        for k in metric_keys)
    pivot = (f"SELECT {run_cols}{metric_cols}\n"
             f"FROM runs r LEFT JOIN metrics m ON m.run_id = r.run_id\n"
             f"WHERE r.family = {quote_literal(family)} AND r.status = 'FINISHED' AND NOT r.is_sweep\n"
             f"GROUP BY {run_cols}")
    return (f"CREATE OR REPLACE TABLE {wide_table(family)} AS\n"
            f"SELECT *, row_number() OVER (PARTITION BY coalesce(generator, model), dataset, split, evaluator, task "
            f"ORDER BY end_time DESC NULLS LAST, run_id) = 1 AS {LATEST_COLUMN}\nFROM (\n{pivot})")


def family_view_sql(family: str) -> str:
    """The family's view, named after the family."""
    return f"CREATE OR REPLACE VIEW {view_name(family)} AS SELECT * FROM {wide_table(family)}"
