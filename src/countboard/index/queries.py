"""SQL of the leaderboard and of ``countboard publish`` (one set of queries: both rank the same entries). Values are
always bound parameters (``?``); the only names composed into SQL are view and column names, which pass
``countboard.index.ddl.quote_identifier`` (snake_case only) first."""

from __future__ import annotations

from countboard.index.ddl import (
    CELLS_SUFFIX,
    LATEST_COLUMN,
    SPREAD_SUFFIX,
    VIEW_RUN_COLUMNS,
    quote_identifier,
    view_name,
)
from countboard.tracking import tags as tg
from countboard.tracking.tags import ERROR, N_FAILED_UNITS, PARTIAL

__all__ = [
    "HAS_VIEW", "VIEW_COLUMNS", "META", "FAMILY_COUNTS", "FAMILY_CHOICES", "ARTIFACTS_OF_RUNS", "ARTIFACT",
    "TAG_VALUES", "PARAM_VALUES", "RUNS", "SWEEPS", "RUN_FACETS", "PARAMS_OF_RUNS", "METRICS_OF_RUNS",
    "STORE_STATE", "FAILED_RUNS", "RUN_PARAMS", "RUN_TAGS", "RUN_METRICS", "family_rows", "tasks_reporting",
    "ranking", "failed_runs_count", "level_values",
]

HAS_VIEW = "SELECT count(*) AS n FROM duckdb_views() WHERE view_name = ? AND database_name = current_database()"

VIEW_COLUMNS = ("SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND database_name = current_database()"
                " ORDER BY column_index")

META = "SELECT key, value FROM meta"

# Per family: finished complete runs (what the pages rank), finished smoke runs (``partial``: hidden unless the
# page's toggle lets them in), failed runs (never ranked) and complete runs with failed units (ranked on the units
# they scored).
FAMILY_COUNTS = f"""
SELECT r.family,
       count(*) FILTER (WHERE r.status = 'FINISHED' AND NOT coalesce(p.value = 'true', false)) AS n,
       count(*) FILTER (WHERE r.status = 'FINISHED' AND coalesce(p.value = 'true', false)) AS n_partial,
       count(*) FILTER (WHERE r.status = 'FAILED') AS n_failed,
       count(*) FILTER (WHERE r.status = 'FINISHED' AND NOT coalesce(p.value = 'true', false)
                        AND coalesce(TRY_CAST(f.value AS BIGINT), 0) > 0) AS n_with_failed_units
FROM runs r
     LEFT JOIN tags p ON p.run_id = r.run_id AND p.key = '{PARTIAL}'
     LEFT JOIN tags f ON f.run_id = r.run_id AND f.key = '{N_FAILED_UNITS}'
WHERE NOT r.is_sweep AND r.family IS NOT NULL
GROUP BY r.family ORDER BY r.family
"""

FAMILY_CHOICES = """
SELECT DISTINCT dataset, split FROM runs
WHERE family = ? AND status = 'FINISHED' AND NOT is_sweep
ORDER BY dataset NULLS LAST, split NULLS LAST
"""

ARTIFACTS_OF_RUNS = """
SELECT a.run_id, a.path, a.file_size, r.artifact_uri
FROM artifacts a JOIN runs r USING (run_id)
WHERE a.run_id IN (SELECT unnest(?::VARCHAR[])) AND NOT a.is_dir AND starts_with(a.path, ?)
ORDER BY a.run_id, a.path
"""

ARTIFACT = """
SELECT r.artifact_uri FROM artifacts a JOIN runs r USING (run_id)
WHERE a.run_id = ? AND a.path = ? AND NOT a.is_dir
"""

TAG_VALUES = """
SELECT run_id, value FROM tags WHERE key = ? AND run_id IN (SELECT unnest(?::VARCHAR[]))
"""

PARAM_VALUES = """
SELECT run_id, value FROM params WHERE key = ? AND run_id IN (SELECT unnest(?::VARCHAR[]))
"""

RUNS = f"""
SELECT r.run_id, r.run_name, r.experiment_id, e.name AS experiment, r.status, r.is_sweep, r.family, r.model,
       r.model_kind, r.dataset, r.split, r.task, r.protocol_label AS protocol, r.start_time, r.end_time,
       r.parent_run_id, r.config_hash, t.value AS error, nullif(m.value, '') AS {tg.MISSING_METRICS},
       count(*) OVER () AS n_matching
FROM runs r LEFT JOIN experiments e USING (experiment_id)
     LEFT JOIN tags t ON t.run_id = r.run_id AND t.key = '{ERROR}'
     LEFT JOIN tags m ON m.run_id = r.run_id AND m.key = '{tg.MISSING_METRICS}'
WHERE (? OR NOT r.is_sweep OR r.run_id = ?)
  AND (? IS NULL OR r.parent_run_id = ? OR r.run_id = ?)
  AND (? IS NULL OR r.family = ?)
  AND (? IS NULL OR r.status = ?)
  AND (? = '' OR concat_ws(' ', r.run_id, r.run_name, r.model, r.dataset, r.task, r.family, r.protocol_label)
                 ILIKE '%' || ? || '%')
ORDER BY r.is_sweep DESC, r.start_time DESC NULLS LAST, r.run_id
LIMIT ? OFFSET ?
"""

SWEEPS = """
SELECT s.run_id, s.run_name, s.start_time, count(c.run_id) AS n_children,
       count(c.run_id) FILTER (WHERE c.status = 'FAILED') AS n_failed
FROM runs s LEFT JOIN runs c ON c.parent_run_id = s.run_id
WHERE s.is_sweep GROUP BY s.run_id, s.run_name, s.start_time ORDER BY s.start_time DESC NULLS LAST
"""

RUN_FACETS = "SELECT DISTINCT family, status FROM runs WHERE NOT is_sweep"

PARAMS_OF_RUNS = "SELECT run_id, key, value FROM params WHERE run_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY key"
METRICS_OF_RUNS = ("SELECT run_id, key, value FROM metrics WHERE run_id IN (SELECT unnest(?::VARCHAR[])) "
                   "ORDER BY key")

STORE_STATE = """
SELECT count(*) FILTER (WHERE NOT is_sweep) AS n_runs,
       count(*) FILTER (WHERE NOT is_sweep AND status = 'FINISHED') AS n_finished,
       count(*) FILTER (WHERE NOT is_sweep AND status = 'FAILED') AS n_failed,
       count(*) FILTER (WHERE NOT is_sweep AND status = 'RUNNING') AS n_running,
       count(*) FILTER (WHERE is_sweep) AS n_sweeps,
       max(start_time) FILTER (WHERE is_sweep) AS last_sweep,
       max(start_time) AS last_run
FROM runs
"""

FAILED_RUNS = f"""
SELECT r.run_id, r.experiment_id, r.run_name, r.model, r.dataset, r.task, r.start_time, t.value AS error
FROM runs r LEFT JOIN tags t ON t.run_id = r.run_id AND t.key = '{ERROR}'
WHERE r.status = 'FAILED' AND NOT r.is_sweep
ORDER BY r.start_time DESC NULLS LAST
LIMIT ?
"""

RUN_PARAMS = "SELECT key, value FROM params WHERE run_id = ? ORDER BY key"
RUN_TAGS = "SELECT key, value FROM tags WHERE run_id = ? ORDER BY key"
RUN_METRICS = "SELECT key, value, step, timestamp FROM metrics WHERE run_id = ? ORDER BY key"


def family_rows(family: str) -> str:
    """Every run row of the family's view (e.g. for the paper-layout table, which merges tasks itself)."""
    return f"SELECT * FROM {view_name(family)}"


def tasks_reporting(family: str, key: str) -> str:
    """How many tasks of the family report metric ``key``."""
    return f"SELECT count(DISTINCT task) AS n FROM {view_name(family)} WHERE {quote_identifier(key)} IS NOT NULL"


def ranking(family: str, sort_key: str, descending: bool, latest_only: bool,
            columns: list[str] | None = None, metric_keys: list[str] | None = None, by_task: bool = False,
            levels: tuple[str, ...] = (), include_partial: bool = False, seeds: bool = False,
            include_failed: bool = False) -> str:
    """Runs of ``family`` (optionally filtered by dataset and split), best first by ``sort_key``.

    Parameters, in order: dataset, dataset, split, split, then value, value per column of ``levels`` (NULL for
    "all"). Partial runs (``partial``: over a subset of their cell's units, e.g. smoke runs) never rank unless
    ``include_partial``; then they form entries of their own (``partial`` true), apart from the complete runs.

    With ``latest_only`` the rows are entries, not runs: one per subject (the generator a run judges, else its
    model) × dataset × split × evaluator, merging the most recent run of each task (a counter's negative-label and
    mosaic runs make one row); each metric comes from the most recent of those runs that has it, ``run_id`` is the
    run that gave ``sort_key`` and ``run_ids`` lists them all. ``metric_keys`` (all metric columns of the view) is
    needed then; ``columns`` narrows the metric columns returned (all when None). ``by_task`` keeps the tasks
    apart (one entry per task, tasks without the ranked metric left out), for when several tasks report it.
    ``seeds`` (with ``latest_only``) reads the family's cells view: a cell's seeds are one row, each metric their
    mean, with ``n_runs`` and the ranked metric's spread (``<key>__std``) beside it.

    Entries of different protocols (``protocol_label``) are never merged: with no protocol among ``levels`` each
    protocol gives rows of its own. Every entry carries ``n_failed_units`` and ``failed_share`` (of the runs
    merged into it); a run with failed units is an entry only when its entry has no clean complete run
    (``is_latest``), unless ``include_failed``: then the latest such run of each entry stands apart (``failed``
    true), like a smoke run.
    """
    seeds = seeds and latest_only
    view = view_name(family + CELLS_SUFFIX) if seeds else view_name(family)
    order = f"{quote_identifier(sort_key)} {'DESC' if descending else 'ASC'} NULLS LAST, model, run_id"
    where = "(? IS NULL OR dataset = ?) AND (? IS NULL OR split = ?)"
    where += "".join(f" AND (? IS NULL OR {quote_identifier(c)} = ?)" for c in levels)
    if not include_partial and not latest_only:
        where += " AND NOT coalesce(partial, false)"
    if not latest_only:
        cols = "*" if columns is None else ", ".join(dict.fromkeys(
            [*map(quote_identifier, VIEW_RUN_COLUMNS), *map(quote_identifier, columns), quote_identifier(sort_key)]))
        return f"SELECT {cols} FROM {view}\nWHERE {where}\nORDER BY {order}"
    if metric_keys is None:
        raise ValueError("ranking(latest_only=True) needs metric_keys, the metric columns of the view")
    keys = list(dict.fromkeys([*(metric_keys if columns is None else columns), sort_key]))
    s = quote_identifier(sort_key)
    by_task = by_task or "task" in levels
    group = "coalesce(generator, model), dataset, split, evaluator, protocol_label" + (", task" if by_task else "")
    apart = [*(["partial"] if include_partial else []), *(["failed"] if include_failed else [])]
    latest = " OR ".join([LATEST_COLUMN, *apart])
    # the latest smoke run (or run with failed units) of an entry stands beside its complete run, unmerged
    group += "".join(f", {c}" for c in apart)
    merged = "".join(f",\n  arg_max({quote_identifier(k)}, end_time) FILTER (WHERE {quote_identifier(k)} IS NOT NULL)"
                     f" AS {quote_identifier(k)}" for k in keys)
    # only the columns used below (a view has dozens: reading them all costs a fifth of the query)
    needed = ["model", "generator", "dataset", "split", "evaluator", "task", tg.PROTOCOL_LABEL, "run_id",
              "experiment_id", "end_time", tg.N_UNITS, tg.N_FAILED_UNITS, *(["partial"] if include_partial else []),
              *keys]
    if seeds:
        spread = quote_identifier(sort_key + SPREAD_SUFFIX)
        merged += (f",\n  arg_max({spread}, end_time) FILTER (WHERE {s} IS NOT NULL) AS {spread},"
                   f"\n  arg_max(n_runs, end_time) FILTER (WHERE {s} IS NOT NULL) AS n_runs")
        needed += [sort_key + SPREAD_SUFFIX, "n_runs"]
    picked = ", ".join(quote_identifier(c) for c in dict.fromkeys(needed))
    picked += ", coalesce(n_failed_units, 0) > 0 AS failed"
    return (
        f"WITH latest AS (SELECT {picked} FROM {view} WHERE {where} AND ({latest}))\n"
        f"SELECT coalesce(generator, model) AS model, dataset, split, evaluator, protocol_label,\n"
        f"  sum(n_failed_units) AS n_failed_units, sum(n_failed_units) / nullif(sum(n_units), 0) AS failed_share,\n"
        f"  coalesce(arg_max(run_id, end_time) FILTER (WHERE {s} IS NOT NULL), arg_max(run_id, end_time)) AS run_id,\n"
        f"  arg_max(experiment_id, end_time) AS experiment_id, list(run_id ORDER BY end_time DESC) AS run_ids,\n"
        f"  string_agg(DISTINCT task, ', ' ORDER BY task) AS task, max(end_time) AS end_time{merged}"
        f"{''.join(f', {c}' for c in apart)}\n"
        f"FROM latest GROUP BY {group}\n"
        f"{f'HAVING count({s}) > 0' if by_task else ''}\n"
        f"ORDER BY {order}")


def failed_runs_count(family: str) -> str:
    """How many finished runs of the family have failed units."""
    return f"SELECT count(*) AS n FROM {view_name(family)} WHERE coalesce(n_failed_units, 0) > 0"


def level_values(family: str, column: str) -> str:
    """Distinct values of a level column of the family's view (e.g. its tasks), in order."""
    c = quote_identifier(column)
    return f"SELECT DISTINCT {c} AS value FROM {view_name(family)} WHERE {c} IS NOT NULL ORDER BY {c}"
