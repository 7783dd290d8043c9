"""Page parts shared by the family pages: empty state, filters and the schema-driven ranking table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import data
import ranking
from countboard.index.ddl import SPREAD_SUFFIX
from countboard.schema import IntervalInfo, MetricInfo

MISSING = "—"

SWEEP_HINT = """\
No finished **{title}** runs in the index `{db}` yet.

Launch a sweep into the store, index it, then reload this page:

```bash
countboard-sweep -m model={models} dataset=<dataset> task=<task> tracking.store_dir=mlruns
countboard index --store mlruns
```
{kinds}"""


def launch_hint(lead: str, sweep_args: str) -> None:
    """An info box: ``lead``, then the sweep to launch (``countboard-sweep <sweep_args>``) and how to index it."""
    st.info(f"{lead} Launch a sweep, e.g.\n\n```bash\ncountboard-sweep {sweep_args} tracking.store_dir=mlruns\n"
            "countboard index --store mlruns\n```\n\nthen reload this page.")


def run_picker(runs: pd.DataFrame, unit: str, default_n: int, key: str) -> tuple[str, str, int]:
    """Select a run, an annotator id and how many ``unit`` to label; returns ``(run_id, annotator, n)``."""
    names = {r.run_id: f"{r.model} · {r.dataset} · {r.run_name}" for r in runs.itertuples()}
    cols = st.columns([3, 1, 1])
    run_id = cols[0].selectbox("Run", list(names), format_func=names.get, key=f"{key}_run")
    annot = cols[1].text_input("Annotator id", key=f"{key}_annot").strip()
    n = int(cols[2].number_input(unit, min_value=1, value=default_n, key=f"{key}_n"))
    return run_id, annot, n


def index_unusable() -> bool:
    """Warn (and return True) when the index was built for another schema version."""
    problem = data.index_problem()
    if problem:
        st.warning(problem)
    return bool(problem)


def empty_state(family: str) -> None:
    """Explain how to fill the page: which sweep to launch and how to index it."""
    if index_unusable():
        return
    fam = data.family(family)
    kinds = f"Models of kind {', '.join(f'`{k}`' for k in fam.model_kinds)} belong here." if fam and fam.model_kinds \
        else ""
    st.info(SWEEP_HINT.format(title=data.family_title(family), db=data.db_path(), models="<model_a>,<model_b>",
                              kinds=kinds))
    if not data.index_exists():
        st.caption("There is no index file yet: `countboard index` creates it from the MLflow store.")


def filters(family: str, key_prefix: str) -> data.Filters:
    """Dataset and split selectors built from the runs present, one selector per schema level (e.g. the task:
    entries of different levels are never ranked together) and, when the index marks partial (smoke) runs, a
    toggle that lets them in (off by default)."""
    opts = data.choices(family)
    fam = data.family(family)
    levels = [(lv, data.level_values(family, lv.column)) for lv in (fam.levels if fam else ())]
    levels = [(lv, vals) for lv, vals in levels if vals]
    cols = st.columns(2 + len(levels))
    datasets = sorted(opts.dataset.dropna().unique()) if not opts.empty else []
    dataset = cols[0].selectbox("Dataset", ["All", *datasets], key=f"{key_prefix}_dataset")
    dataset = None if dataset == "All" else dataset
    subset = opts[opts.dataset == dataset] if dataset and not opts.empty else opts
    splits = sorted(subset.split.dropna().unique()) if not subset.empty else []
    split = cols[1].selectbox("Split", ["All", *splits], key=f"{key_prefix}_split")
    chosen = tuple((lv.column, cols[2 + i].selectbox(lv.display, vals, key=f"{key_prefix}_level_{lv.column}"))
                   for i, (lv, vals) in enumerate(levels))
    partial = False
    if data.has_partial_column(family):
        partial = st.toggle("Include partial (smoke) runs", value=False, key=f"{key_prefix}_partial")
    return data.Filters(dataset=dataset, split=None if split == "All" else split, levels=chosen,
                        include_partial=partial)


def metric_picker(family: str, metrics: list[MetricInfo], key_prefix: str) -> tuple[MetricInfo, list[MetricInfo]]:
    """The metric to rank by (default: the family's main metric) and the columns to show (default: the
    schema's ``columns``)."""
    fam = data.family(family)
    keys = [m.key for m in metrics]
    main = fam.main_metric if fam and fam.main_metric in keys else keys[0]
    by_key = {m.key: m for m in metrics}
    cols = st.columns([1, 2])
    sort_key = cols[0].selectbox("Rank by", keys, index=keys.index(main), key=f"{key_prefix}_sort",
                                 format_func=lambda k: by_key[k].display)
    default = [m.key for m in data.default_columns(family, metrics)] or keys[:data.DEFAULT_COLUMNS]
    shown = cols[1].multiselect("Columns", keys, default=default, key=f"{key_prefix}_cols",
                                format_func=lambda k: by_key[k].display)
    return by_key[sort_key], [by_key[k] for k in keys if k in shown and k != sort_key]


def rank_column(df: pd.DataFrame, sort: MetricInfo, interval: IntervalInfo | None, groups: list[str]) -> list[str]:
    """Rank of each row within its group: ties share a rank, and with an interval, entries whose intervals
    overlap share a rank range (``1–3``)."""
    higher = sort.higher_is_better is not False
    labels = pd.Series(MISSING, index=df.index, dtype=object)
    for _, part in df.groupby(groups, sort=False, dropna=False):
        mean = part[sort.key].to_numpy(dtype=float)
        if interval is not None:
            best, worst = ranking.rank_ranges(mean, part[interval.low].to_numpy(dtype=float),
                                              part[interval.high].to_numpy(dtype=float), higher)
        else:
            best = worst = ranking.competition_ranks(mean, higher)
        labels[part.index] = [ranking.rank_label(b, w) for b, w in zip(best, worst, strict=True)]
    return list(labels)


def ranking_frame(df: pd.DataFrame, metrics: list[MetricInfo], sort: MetricInfo,
                  interval: IntervalInfo | None = None, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Rank, model, the ranked metric (and its interval), dataset, split, the other metric columns and a link to
    each run's MLflow page.

    ``df`` comes best first; rows are grouped by dataset and split (and evaluator, when shown, and task, when a
    model has one entry per task), keeping that order inside each group, and ranked within their group: models are
    only compared on the same data.
    """
    groups = ["dataset", "split", *(["evaluator"] if "evaluator" in extra else [])]
    if "task" in df and "task" not in extra and df.duplicated(["model", *groups]).any():
        extra, groups = (*extra, "task"), [*groups, "task"]  # entries split per task: rank each task apart
    df = df.sort_values(groups, kind="stable", na_position="last").reset_index(drop=True)
    out = pd.DataFrame({"rank": rank_column(df, sort, interval, groups), "model": df.model.to_numpy()})
    out[sort.key] = df[sort.key].to_numpy(dtype=float)
    if interval is not None:
        out[interval.low] = df[interval.low].to_numpy(dtype=float)
        out[interval.high] = df[interval.high].to_numpy(dtype=float)
    spread = f"{sort.key}{SPREAD_SUFFIX}"
    if spread in df and "n_runs" in df and (df["n_runs"] > 1).any():  # seeds of a cell: mean, spread and n
        out[spread] = df[spread].to_numpy(dtype=float)
        out["n_runs"] = df["n_runs"].to_numpy(dtype=int)
    for col in ("dataset", "split", *extra):
        out[col] = df[col].astype(object).where(df[col].notna(), MISSING).to_numpy()
    for m in metrics:
        if m.key not in out:
            out[m.key] = df[m.key].to_numpy(dtype=float)
    out["run"] = [data.run_url(e, r) for e, r in zip(df.experiment_id, df.run_id, strict=True)]
    return out


def format_value(v, fmt: str) -> str:
    """A metric value in the schema's format (``d``: a whole number); missing values as a dash, never "None".

    Example:
        >>> format_value(3.0, "d"), format_value(0.12345, ".3f"), format_value(float("nan"), ".3f")
        ('3', '0.123', '—')
    """
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return MISSING
    spec = fmt or ".3f"
    if spec.endswith("d"):
        return format(int(round(float(v))), spec)
    return format(float(v), spec)


def _formatter(fmt: str):
    return lambda v: format_value(v, fmt)


def show_ranking(df: pd.DataFrame, metrics: list[MetricInfo], sort: MetricInfo, extra: tuple[str, ...] = (),
                 key: str | None = None, interval: IntervalInfo | None = None) -> pd.DataFrame:
    """The ranking table, columns named and formatted from the schema; rank, model and the ranked metric are
    pinned at the left so they stay in view however many columns follow. Returns the frame shown."""
    frame = ranking_frame(df, metrics, sort, interval, extra)
    arrow = {True: "↑", False: "↓", None: ""}
    infos = {m.key: m for m in [sort, *metrics]}
    config = {k: st.column_config.NumberColumn(f"{m.display} {arrow[m.higher_is_better]}".strip(),
                                               help=(m.description or None), pinned=k == sort.key)
              for k, m in infos.items()}
    formats = {k: _formatter(m.fmt) for k, m in infos.items()}
    if interval is not None:
        pct = f"{interval.level:.0%}"
        for bound, side in ((interval.low, "low"), (interval.high, "high")):
            config[bound] = st.column_config.NumberColumn(f"{pct} {side}", pinned=True)
            formats[bound] = _formatter(sort.fmt)
    spread = f"{sort.key}{SPREAD_SUFFIX}"
    if spread in frame:
        config[spread] = st.column_config.NumberColumn("± sd (seeds)", pinned=True,
                                                       help="Standard deviation of the ranked metric over the seeds "
                                                            "of the cell; the value is their mean.")
        formats[spread] = _formatter(sort.fmt)
        config["n_runs"] = st.column_config.NumberColumn("seeds", pinned=True)
    config["run"] = st.column_config.LinkColumn("MLflow", display_text="open run")
    config["rank"] = st.column_config.TextColumn("#", pinned=True, help="Rank within dataset and split; entries "
                                                 "whose intervals overlap share a rank range, equal values a rank.")
    config["model"] = st.column_config.TextColumn("model", pinned=True)
    direction = "higher is better" if sort.higher_is_better is not False else "lower is better"
    how = f", with its {interval.level:.0%} interval" if interval is not None else " (no interval in the schema)"
    st.caption(f"Ranked by **{sort.display}** ({direction}){how}; ↑ higher is better, ↓ lower is better.")
    st.dataframe(frame.style.format(formats, na_rep=MISSING), column_config=config, hide_index=True, key=key)
    return frame


def missing(what: str, path: str) -> None:
    """Say which artifact a chart needs when no selected run has it."""
    st.info(f"No {what}: none of the selected runs has the artifact `{path}`.")
