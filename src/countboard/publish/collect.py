"""What a publication holds, read from the index: per family and benchmark (dataset × split) the ranked tables the
board shows, each entry's runs and their provenance. No HTML here (``render``), no files (``site``).

The rows come from the board's own query (``countboard.index.queries.ranking``: the latest complete run of each
task merged into one entry, one protocol per table) and are ranked by the board's rule
(``countboard.quantify.ranks.ranks_within``); P(A > B) uses the board's functions too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from countboard.index import queries
from countboard.index.ddl import CELLS_SUFFIX, LATEST_COLUMN, SPREAD_SUFFIX, VIEW_RUN_COLUMNS
from countboard.protocol import DEFAULT_LABEL
from countboard.quantify import ranks
from countboard.schema import FamilyInfo, IntervalInfo, MetricInfo, Schema
from countboard.tracking import tags as tg

#: Entries drawn in the P(A > B) matrix and the count-drift chart of a table (the board's limits).
TOP_PAIRWISE = 8
TOP_DRIFT = 10
PARTIAL_COLUMN = "partial"


@dataclass(frozen=True)
class Options:
    """What to publish. Empty ``families`` / ``datasets``: every family that has a page, every dataset."""

    families: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    title: str = "Countboard leaderboard"
    base_url: str = ""


@dataclass
class Pairwise:
    labels: list[str]
    p: np.ndarray  # p[i, j] = P(entry i better than entry j)
    how: str


@dataclass
class RankedTable:
    """One ranking: the entries of a family on one dataset × split × protocol (× task, × evaluator), best first."""

    key: str
    family: str
    dataset: str | None
    split: str | None
    context: dict[str, str]  # protocol, task, evaluator of the table
    sort: MetricInfo
    interval: IntervalInfo | None
    beside: str | None  # a second value drawn beside the ranked one (CC beside BCC)
    metrics: list[MetricInfo]  # the other columns
    rows: pd.DataFrame  # entry_id, model, rank, rank_best, rank_worst, tie_group, metric columns, run ids
    pairwise: Pairwise | None = None
    drift: list[dict] = field(default_factory=list)  # per entry: label, box statistics of drift and c_neg
    gallery: list[dict] = field(default_factory=list)  # per image: entry label, run id, artifact path
    references: pd.DataFrame | None = None  # the papers' values beside ours (``references.compare``)


@dataclass
class Benchmark:
    family: FamilyInfo
    dataset: str | None
    split: str | None
    tables: list[RankedTable]

    @property
    def slug(self) -> str:
        return slug(self.family.key, self.dataset or "none", self.split or "none")


@dataclass
class Entry:
    entry_id: str
    family: str
    model: str
    dataset: str | None
    split: str | None
    context: dict[str, str]
    run_ids: list[str]
    values: dict[str, float]  # the ranked tables' metrics of this entry
    table: str  # key of its ranking
    rank: str
    tie_group: str


def slug(*parts: str) -> str:
    """A file name made of ``parts``: letters, digits, ``-`` and ``_`` kept, anything else ``-``, with a short hash
    of the parts when something had to change (so that two names never meet).

    Example:
        >>> slug("counters", "fsc147", "test"), slug("a/b", "c")
        ('counters__fsc147__test', 'a-b__c-6d2a1c9c')
    """
    text = "__".join(parts)
    clean = "".join(c if c.isalnum() and c.isascii() or c in "-_" else "-" for c in text)
    if clean == text:
        return clean
    return f"{clean}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def entry_id(family: str, row: dict, by_task: bool) -> str:
    """A stable id of an entry: its family, model, dataset, split, evaluator, protocol (and task when tasks are
    ranked apart); the same in every publication of any store, so that two can be compared."""
    key = [family, row.get("model"), row.get("dataset"), row.get("split"), row.get("evaluator"),
           row.get(tg.PROTOCOL_LABEL), row.get("task") if by_task else None]
    return hashlib.sha256(json.dumps([None if _missing(v) else str(v) for v in key]).encode()).hexdigest()[:12]


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA or v is pd.NaT


class IndexReader:
    """The index through one read-only connection, with the family views' columns and the schema."""

    def __init__(self, con, schema: Schema):
        self.con, self.schema = con, schema
        self._columns: dict[str, list[str]] = {}

    def df(self, sql: str, params=()) -> pd.DataFrame:
        return self.con.execute(sql, list(params)).df()

    def view_columns(self, view: str) -> list[str]:
        if view not in self._columns:
            has = self.df(queries.HAS_VIEW, (view,))
            self._columns[view] = list(self.df(queries.VIEW_COLUMNS, (view,)).column_name) \
                if int(has.n.iloc[0]) else []
        return self._columns[view]

    def view_metrics(self, family: str) -> list[MetricInfo]:
        """The family view's metric columns in schema order (undeclared keys get neutral metadata), as the board."""
        keys = [c for c in self.view_columns(family)
                if c not in VIEW_RUN_COLUMNS and c not in (LATEST_COLUMN, PARTIAL_COLUMN)]
        order = {k: i for i, k in enumerate(self.schema.metrics)}
        infos = [self.schema.metrics.get(k) or MetricInfo(key=k, display=k, higher_is_better=None, family=family)
                 for k in keys]
        return sorted(infos, key=lambda m: (order.get(m.key, len(order)), m.key))


def interval_of(metric: MetricInfo, have: set[str]) -> IntervalInfo | None:
    iv = metric.interval
    return iv if iv is not None and iv.low in have and iv.high in have else None


def shown_metrics(fam: FamilyInfo, metrics: list[MetricInfo], main: MetricInfo) -> list[MetricInfo]:
    """The family's schema ``columns`` that the view has, else its metrics with a direction (the board's default),
    bounds left out (they stand beside their metric)."""
    have = {m.key: m for m in metrics if m.bound_of is None}
    picked = [have[k] for k in fam.columns if k in have] if fam.columns else []
    if not picked:
        picked = [m for m in have.values() if m.family == fam.key and m.higher_is_better is not None][:10]
    return [m for m in picked if m.key != main.key]


def figure(fam: FamilyInfo, kind: str):
    return next((f for f in fam.figures if f.kind == kind), None)


def family_entries(reader: IndexReader, fam: FamilyInfo, extra_keys: list[str]) -> tuple[pd.DataFrame, dict]:
    """Every entry of ``fam`` (all datasets, splits, protocols and levels, each apart), best first by the main
    metric, from the board's query; and what it was ranked by (``sort``, ``interval``, ``beside``, ``metrics``,
    ``by_task``). ``extra_keys``: more metric columns to fetch (the papers' metrics and their bounds)."""
    metrics = reader.view_metrics(fam.key)
    by_key = {m.key: m for m in metrics}
    main = by_key.get(fam.main_metric)
    if main is None:
        return pd.DataFrame(), {}
    have = set(by_key)
    interval = interval_of(main, have)
    fig = figure(fam, "intervals")
    beside = fig.get("beside") if fig else None
    beside = beside if beside in have and beside != main.key else None
    shown = shown_metrics(fam, metrics, main)
    bounds = [interval.low, interval.high, *([interval.count] if interval and interval.count else [])] \
        if interval else []
    columns = [k for k in dict.fromkeys([m.key for m in shown] + bounds + ([beside] if beside else [])
                                        + extra_keys) if k in have]
    levels = tuple(lv.column for lv in fam.levels if lv.column in reader.view_columns(fam.key))
    reporting = reader.df(queries.tasks_reporting(fam.key, main.key))
    by_task = int(reporting.n.iloc[0]) > 1 or "task" in levels
    seeds = f"{main.key}{SPREAD_SUFFIX}" in reader.view_columns(f"{fam.key}{CELLS_SUFFIX}")
    sql = queries.ranking(fam.key, main.key, main.higher_is_better is not False, True, columns,
                          [m.key for m in metrics], by_task, levels=levels, seeds=seeds)
    df = reader.df(sql, (None,) * (4 + 2 * len(levels)))
    return df, {"sort": main, "interval": interval, "beside": beside, "metrics": shown, "by_task": by_task}


def split_tables(fam: FamilyInfo, df: pd.DataFrame, how: dict) -> list[RankedTable]:
    """The family's entries cut into rankings the board would show apart: per dataset, split, protocol, task (when
    tasks are ranked apart) and evaluator, each ranked by the board's rule, tie groups beside."""
    df = df.assign(evaluator=df.evaluator.where(df.evaluator.notna(), None))
    parts = ["dataset", "split", tg.PROTOCOL_LABEL, *(["task"] if how["by_task"] else []), "evaluator"]
    sort, interval = how["sort"], how["interval"]
    tables = []
    keyed = df.assign(_order=np.arange(len(df)))
    protocol_rank = {DEFAULT_LABEL: 0}
    for group, part in keyed.groupby(parts, sort=False, dropna=False):
        values = dict(zip(parts, group, strict=True))
        part = part.sort_values("_order").drop(columns="_order").reset_index(drop=True)
        mean = part[sort.key].to_numpy(dtype=float)
        low = part[interval.low].to_numpy(dtype=float) if interval else None
        high = part[interval.high].to_numpy(dtype=float) if interval else None
        best, worst, tie = ranks.ranks_within(np.zeros(len(part), dtype=int), mean, low, high,
                                              sort.higher_is_better is not False)
        part.insert(0, "rank", [ranks.rank_label(b, w) for b, w in zip(best, worst, strict=True)])
        part.insert(1, "rank_best", best)
        part.insert(2, "rank_worst", worst)
        part.insert(3, "tie_group", tie)
        part.insert(0, "entry_id", [entry_id(fam.key, r, how["by_task"]) for r in part.to_dict("records")])
        context = {k: str(values[k]) for k in (tg.PROTOCOL_LABEL, "task", "evaluator")
                   if k in values and not _missing(values[k])}
        dataset = None if _missing(values["dataset"]) else str(values["dataset"])
        split = None if _missing(values["split"]) else str(values["split"])
        key = slug(fam.key, dataset or "none", split or "none", *(context[k] for k in sorted(context)))
        tables.append(RankedTable(key, fam.key, dataset, split, context, sort, interval, how["beside"],
                                  how["metrics"], part))
    # the default protocol first, then by name: the order of a page never depends on the store's row order
    tables.sort(key=lambda t: (t.dataset or "", t.split or "", protocol_rank.get(t.context.get(tg.PROTOCOL_LABEL),
                                                                                 1),
                               t.context.get(tg.PROTOCOL_LABEL, ""), t.context.get("task", ""),
                               t.context.get("evaluator", "")))
    return tables


def labels_of(rows: pd.DataFrame) -> list[str]:
    """A short unique label per entry of one table: its model (with a part of its run id when two are alike)."""
    seen: set[str] = set()
    out = []
    for model, run in zip(rows.model, rows.run_id, strict=True):
        label = str(model)
        label = f"{label} ({str(run)[:6]})" if label in seen else label
        seen.add(label)
        out.append(label)
    return out


def pairwise(table: RankedTable, draws: list[np.ndarray | None] | None = None) -> Pairwise | None:
    """P(A better than B) between the table's best entries, as the board computes it: from posterior draws when
    every entry has them (the main metric of a family whose figure names them), else a normal per entry for a
    bootstrap interval, else a Beta per entry for a rate's interval. None without an interval or two entries."""
    if table.interval is None:
        return None
    iv, sort = table.interval, table.sort
    keep = table.rows[[sort.key, iv.low, iv.high]].notna().all(axis=1).to_numpy()
    part = table.rows[keep].head(TOP_PAIRWISE)
    if len(part) < 2:
        return None
    labels = labels_of(part)
    if draws is not None:
        picked = [d for d, k in zip(draws, keep, strict=True) if k][:TOP_PAIRWISE]
        if all(d is not None for d in picked):
            p = ranks.prob_greater_draws(labels, picked)
            return Pairwise(labels, p.T if sort.higher_is_better is False else p,
                            "From each entry's posterior draws, moment-matched to a Beta; entries independent.")
    mean, low, high = (part[c].to_numpy(dtype=float) for c in (sort.key, iv.low, iv.high))
    if iv.units:
        p = ranks.prob_greater_normal(mean, low, high, iv.level)
        how = (f"Each entry as a normal with its value and the spread of its {iv.level:.0%} bootstrap interval over "
               f"its {iv.units}; entries independent.")
    else:
        try:
            p = ranks.prob_greater_intervals(labels, mean, low, high, iv.level)
        except ValueError:
            return None
        how = f"Each entry as a Beta with its mean and the spread of its {iv.level:.0%} interval; entries independent."
    return Pairwise(labels, p.T if sort.higher_is_better is False else p, how)


def box_stats(values) -> dict | None:
    """Quartiles, whiskers (the furthest points within 1.5 IQR) and mean of ``values`` for a precomputed box.

    Example:
        >>> box_stats([1.0, 2.0, 3.0, 4.0, 100.0])["upperfence"]
        4.0
    """
    v = np.sort(np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float))
    if not len(v):
        return None
    q1, med, q3 = (float(np.quantile(v, q)) for q in (0.25, 0.5, 0.75))
    iqr = q3 - q1
    inside = v[(v >= q1 - 1.5 * iqr) & (v <= q3 + 1.5 * iqr)]
    return {"q1": q1, "median": med, "q3": q3, "lowerfence": float(inside.min()), "upperfence": float(inside.max()),
            "mean": float(v.mean()), "n": int(len(v))}
