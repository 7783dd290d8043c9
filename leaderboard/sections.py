"""The figures a family's schema entry lists under ``figures``, one drawing function per kind.

Each function takes the section's ``Ctx`` (the ranked entries and what they were ranked by) and the figure's
``FigureInfo`` (artifact paths and columns from the schema); it draws or says which artifact is missing. The
galleries live in ``galleries``; ``DRAW`` maps every kind to its function.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

import data
import figures
import ranking
import widgets
from countboard.escaping import md, md_code
from countboard.schema import FigureInfo, IntervalInfo, MetricInfo
from countboard.tracking import tags as tg

MIN_PAIRWISE = 2
# Charts of many entries are unreadable and slow: figures that overlay entries draw the best ones only, and say so.
TOP_ENTRIES = 10
TOP_INTERVALS = 30
TOP_PAIRWISE = 8


@dataclass
class Ctx:
    family: str
    df: pd.DataFrame  # ranked entries: model, evaluator, run_id, run_ids, metric columns
    sort: MetricInfo
    interval: IntervalInfo | None
    labels: dict[str, str]  # entry run_id -> short unique label
    prefix: str  # widget key prefix

    def entry_runs(self, entry: str) -> list[str]:
        return list(self.df.set_index("run_id").loc[entry, "run_ids"])

    def one_group(self, name: str) -> pd.DataFrame:
        """The entries of one dataset × split (a selector when there are several): models are compared on the
        same data only."""
        keys = [f"{d} · {s}" for d, s in zip(self.df.dataset, self.df.split, strict=True)]
        groups = list(dict.fromkeys(keys))
        if len(groups) == 1:
            return self.df
        pick = st.selectbox("Dataset · split", groups, key=f"{self.prefix}_{name}_group")
        return self.df[[k == pick for k in keys]]

    def top(self, n: int) -> pd.DataFrame:
        """The ``n`` best entries (the frame comes best first)."""
        if len(self.df) > n:
            st.caption(f"The {n} best of {len(self.df)} entries by {self.sort.display}; filter to see others.")
        return self.df.head(n)


def entry_labels(df: pd.DataFrame) -> dict[str, str]:
    """A short, unique label per entry: the model, plus evaluator, dataset/split and task where they vary."""
    parts = [c for c in ("evaluator", "dataset", "task") if c in df and df[c].nunique(dropna=False) > 1]
    labels: dict[str, str] = {}
    for row in df.itertuples():
        bits = [str(row.model)] + [str(getattr(row, c)) for c in parts if pd.notna(getattr(row, c))]
        label = " · ".join(bits)
        labels[row.run_id] = label if label not in labels.values() else f"{label} ({row.run_id[:6]})"
    return labels


def pick_entry(ctx: Ctx, name: str, have: set[str] | None = None) -> str | None:
    """A selector over the entries (those with an artifact in ``have`` when given); None when there is none."""
    entries = [e for e, ids in zip(ctx.df.run_id, ctx.df.run_ids, strict=True) if have is None or have & set(ids)]
    if not entries:
        return None
    return st.selectbox("Entry", entries, format_func=lambda r: ctx.labels.get(r, r), key=f"{ctx.prefix}_{name}_entry")


def runs_with(ctx: Ctx, path: str) -> set[str]:
    ids = [r for ids in ctx.df.run_ids for r in ids]
    files = data.artifacts(ids, path)
    return set(files[files.path == path].run_id) if not files.empty else set()


def stacked(ctx: Ctx, path: str) -> pd.DataFrame:
    """The table ``path`` of the best entries (each from its most recent run that has it), with a ``label``."""
    frames = []
    df = ctx.top(TOP_ENTRIES)
    have = runs_with(ctx, path)
    for entry, ids in zip(df.run_id, df.run_ids, strict=True):
        source = next((r for r in ids if r in have), None)
        table = data.read_table(source, path) if source else None
        if table is not None and not table.empty:
            frames.append(table.assign(label=ctx.labels[entry]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def no_interval(ctx: Ctx, what: str) -> None:
    st.info(f"{what} needs an interval: **{ctx.sort.display}** has none in the schema (`interval:` in "
            "countboard/schema/*.yaml). Rank by a metric with one, e.g. the family's main metric.")


def draw_intervals(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader(f"{ctx.sort.display} with its interval")
    if ctx.interval is None:
        no_interval(ctx, "This chart")
        return
    iv = ctx.interval
    beside = fig.get("beside")
    beside = beside if beside in ctx.df and beside != ctx.sort.key and ctx.df[beside].notna().any() else None
    group = ctx.one_group("intervals")
    if len(group) > TOP_INTERVALS:
        st.caption(f"The {TOP_INTERVALS} best of {len(group)} entries by {ctx.sort.display}.")
    top = group.head(TOP_INTERVALS)
    df = top.assign(label=top.run_id.map(ctx.labels)).dropna(subset=[ctx.sort.key, iv.low, iv.high])
    df = df.assign(behind=interval_basis(ctx, df))
    facet = "evaluator" if "evaluator" in df and df.evaluator.nunique() > 1 else None
    names = (ctx.sort.display, data.metric_display(beside) if beside else "")
    st.plotly_chart(figures.interval_chart(df, "label", ctx.sort.key, iv.low, iv.high, beside, facet,
                                           f"{ctx.sort.display} and its {iv.level:.0%} interval", names=names,
                                           axis=ctx.sort.display, hover="behind"), key=f"{ctx.prefix}_intervals")
    st.caption("Hover an entry for what its interval rests on: its units, its seeds and how it was drawn.")


def interval_basis(ctx: Ctx, df: pd.DataFrame) -> list[str]:
    """Per entry, what its interval rests on: the units resampled (and how many), the seeds, the resampling."""
    iv = ctx.interval
    how = data.run_tag(list(df.run_id), tg.BOOTSTRAP) if iv.units else {}
    out = []
    for row in df.to_dict("records"):
        count = row.get(iv.count) if iv.count else None
        units = (f"{int(count)} {iv.units}" if count is not None and pd.notna(count) else iv.units) if iv.units \
            else "posterior draws"
        seeds = int(row["n_runs"]) if pd.notna(row.get("n_runs")) else 1
        text = f"{iv.level:.0%} interval over {units}; {seeds} seed{'s' if seeds != 1 else ''}"
        text += " (bounds averaged)" if seeds > 1 else ""
        if iv.units:
            text += f"<br>bootstrap: {how.get(row['run_id'], 'not recorded')}"
        out.append(text)
    return out


def _pairwise_matrix(ctx: Ctx, part: pd.DataFrame, fig: FigureInfo) -> tuple[np.ndarray | None, str]:
    names = [ctx.labels[r] for r in part.run_id]
    draws_path = fig.get("draws")
    fam = data.family(ctx.family)
    if draws_path and fam and ctx.sort.key == fam.main_metric:
        have = runs_with(ctx, draws_path)
        draws = [read_draws([r for r in ids if r in have], draws_path) for ids in part.run_ids]
        if all(d is not None for d in draws):
            return (_prob_draws(tuple(names), tuple(tuple(d) for d in draws)),
                    f"From each entry's posterior draws ({draws_path}), moment-matched to a Beta; entries independent.")
    if ctx.interval is None:
        return None, ""
    iv = ctx.interval
    if iv.units:  # a bootstrap interval of any metric, not a rate's posterior
        p = _prob_normal(tuple(part[ctx.sort.key]), tuple(part[iv.low]), tuple(part[iv.high]), iv.level)
        return p, (f"Each entry as a normal with its value and the spread of its {iv.level:.0%} bootstrap interval "
                   f"over its {iv.units}; entries independent.")
    try:
        p = _prob_intervals(tuple(names), tuple(part[ctx.sort.key]), tuple(part[iv.low]), tuple(part[iv.high]),
                            iv.level)
    except ValueError as exc:
        st.info(f"P(A > B) needs rates in (0, 1) with their intervals: {md(exc)}")
        return None, ""
    return p, (f"Each entry as a Beta with its mean and the spread of its {iv.level:.0%} interval (level from the "
               "schema); entries independent.")


@st.cache_data(max_entries=64, show_spinner=False)
def _prob_intervals(names: tuple, mean: tuple, low: tuple, high: tuple, level: float) -> np.ndarray:
    return ranking.prob_greater_intervals(list(names), mean, low, high, level)


@st.cache_data(max_entries=64, show_spinner=False)
def _prob_normal(mean: tuple, low: tuple, high: tuple, level: float) -> np.ndarray:
    return ranking.prob_greater_normal(mean, low, high, level)


@st.cache_data(max_entries=64, show_spinner=False)
def _prob_draws(names: tuple, draws: tuple) -> np.ndarray:
    return ranking.prob_greater_draws(list(names), [np.asarray(d) for d in draws])


def draw_pairwise(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader(f"Pairwise P(A > B) by {ctx.sort.display}")
    df = ctx.one_group("pairwise")
    if "evaluator" in df and df.evaluator.nunique() > 1:
        evaluators = list(dict.fromkeys(df.evaluator))
        ev = st.selectbox("Evaluator", evaluators, key=f"{ctx.prefix}_pair_eval")
        df = df[df.evaluator == ev]
    needed = [ctx.sort.key] + ([ctx.interval.low, ctx.interval.high] if ctx.interval else [])
    part = df.dropna(subset=needed)
    if len(part) > TOP_PAIRWISE:
        st.caption(f"The {TOP_PAIRWISE} best of {len(part)} entries.")
        part = part.head(TOP_PAIRWISE)
    if len(part) < MIN_PAIRWISE:
        st.info("Pairwise probabilities need at least two entries with a value and an interval.")
        return
    p, how = _pairwise_matrix(ctx, part, fig)
    if p is None:
        if ctx.interval is None:
            no_interval(ctx, "P(A > B)")
        return
    if ctx.sort.higher_is_better is False:
        p = p.T
    st.plotly_chart(figures.pairwise_heatmap(p, [ctx.labels[r] for r in part.run_id],
                                             f"P(A better than B) by {ctx.sort.display}"), key=f"{ctx.prefix}_pairwise")
    st.caption(how)


def read_draws(run_ids: list[str], path: str, cell: str = "all") -> np.ndarray | None:
    """Posterior draws of the pooled rate (cell ``all``) from an entry's draws array, if it has one."""
    arrays = data.read_arrays(run_ids[0], path) if run_ids else None
    if not arrays or "p" not in arrays or "cells" not in arrays:
        return None
    cells = [str(c) for c in arrays["cells"]]
    return np.asarray(arrays["p"])[cells.index(cell)] if cell in cells else None


def has_evaluators(ctx: Ctx) -> bool:
    """Whether the entries come from two evaluators or more (what rank stability across evaluators needs)."""
    return "evaluator" in ctx.df and ctx.df.evaluator.nunique() >= 2


def draw_evaluator_stability(ctx: Ctx, fig: FigureInfo) -> None:
    df = ctx.df
    if not has_evaluators(ctx):
        return
    st.subheader("Rank stability across evaluators")
    best = set(df.model.head(TOP_ENTRIES))
    r = figures.ranks(df[df.model.isin(best)].dropna(subset=[ctx.sort.key]), "model", "evaluator", ctx.sort.key,
                      ctx.sort.higher_is_better is not False)
    cols = st.columns(2)
    cols[0].plotly_chart(figures.rank_chart(r, "model", "evaluator", f"Rank by {ctx.sort.display}"),
                         key=f"{ctx.prefix}_ranks")
    cols[1].markdown("Kendall's τ between evaluators' rankings")
    cols[1].dataframe(figures.kendall_between(r, "model", "evaluator").round(3), key=f"{ctx.prefix}_tau")


def draw_prompt_types(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader("Per prompt type")
    path, value = fig.get("table"), fig.get("value")
    table = stacked(ctx, path)
    if table.empty or value not in table or "prompt_type" not in table:
        widgets.missing("per-prompt-type table", path)
        return
    low, high = fig.get("low"), fig.get("high")
    error = (low, high) if low in table and high in table else None
    st.plotly_chart(figures.bars(table, "prompt_type", value, "label", f"{value} per prompt type", error=error),
                    key=f"{ctx.prefix}_types")


def draw_confusion(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader("Confusion matrix")
    path = fig.get("table") or fig.get("samples")
    entry = pick_entry(ctx, "confusion", runs_with(ctx, path))
    if entry is None:
        widgets.missing("confusion matrix", path)
        return
    source = data.first_with(ctx.entry_runs(entry), path)
    table = data.read_table(source, path)
    if fig.get("samples"):
        req, cnt = fig.get("requested"), fig.get("counted")
        if table is None or not {req, cnt} <= set(table.columns):
            widgets.missing("confusion matrix", f"{path} ({req}, {cnt})")
            return
        table, rows, cols, value = figures.number_confusion(table[req], table[cnt]), "requested", "counted", "n"
    else:
        rows, cols, value = fig.get("rows"), fig.get("columns"), fig.get("value")
        if table is None or not {rows, cols, value} <= set(table.columns):
            widgets.missing("confusion matrix", f"{path} ({rows}, {cols}, {value})")
            return
    st.plotly_chart(figures.matrix_heatmap(table, rows, cols, value, f"{ctx.labels[entry]}: {rows} × {cols}"),
                    key=f"{ctx.prefix}_confusion")


def draw_drift(ctx: Ctx, fig: FigureInfo) -> None:
    """Count drift of the positive (upper) half, with the count on the distractor (lower) half beside it: a counter
    blind to the class keeps its upper-half count and so looks perfect on drift alone."""
    st.subheader("Count drift, with the count on the distractor half")
    path, value, beside = fig.get("table"), fig.get("value"), fig.get("beside")
    pairs = stacked(ctx, path)
    if pairs.empty or value not in pairs:
        widgets.missing("count drift", f"{path} ({value})")
        return
    names = (f"{value}: |c_pos − c_single| / c_single (upper)", f"{beside}: count on the distractor (lower, ideal 0)")
    st.plotly_chart(figures.box(pairs, "label", value, "Mosaic test per counter", beside=beside, names=names),
                    key=f"{ctx.prefix}_drift")
    if beside not in pairs:
        st.caption(f"{md_code(path)} has no `{beside}` column: the distractor-half count cannot be shown beside the drift.")


def draw_negative_heatmap(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader("Negative-label counts")
    path = fig.get("table")
    entry = pick_entry(ctx, "negative", runs_with(ctx, path))
    if entry is None:
        widgets.missing("negative-label matrix", path)
        return
    table = data.read_table(data.first_with(ctx.entry_runs(entry), path), path)
    rows, cols, value = fig.get("rows"), fig.get("columns"), fig.get("value")
    if table is None or not {rows, cols, value} <= set(table.columns):
        widgets.missing("negative-label matrix", f"{path} ({rows}, {cols}, {value})")
        return
    st.plotly_chart(figures.matrix_heatmap(table, rows, cols, value,
                                           f"{ctx.labels[entry]}: mean count per image class (rows) × prompted class"),
                    key=f"{ctx.prefix}_negative")


def draw_histograms(ctx: Ctx, fig: FigureInfo) -> None:
    """Per-sample distributions of the scores the task histogrammed (the ``metric`` column of its table)."""
    st.subheader("Per-sample distributions")
    table = stacked(ctx, fig.get("table"))
    keys = list(dict.fromkeys(table.metric)) if "metric" in table else []
    samples = stacked(ctx, fig.get("samples"))
    keys = [k for k in keys if k in samples]
    if not keys:
        widgets.missing("per-sample scores", f"{fig.get('samples')} with the metrics of {fig.get('table')}")
        return
    panels = st.columns(min(len(keys), 2))
    for i, k in enumerate(keys):
        panels[i % len(panels)].plotly_chart(figures.histograms(samples, k, "label", data.metric_display(k)),
                                             key=f"{ctx.prefix}_hist_{k}")


def draw_pointing(ctx: Ctx, fig: FigureInfo) -> None:
    st.subheader("Pointing game and its uncertainty")
    keys = [k for k in fig.get("keys", ()) if k in ctx.df and ctx.df[k].notna().any()]
    if not keys:
        st.info(f"No pointing-game metric ({', '.join(fig.get('keys', ()))}) in these entries.")
        return
    top = ctx.top(TOP_ENTRIES * 2)
    long = top.assign(label=top.run_id.map(ctx.labels)).melt(id_vars=["label"], value_vars=keys,
                                                                     var_name="metric")
    long["metric"] = long.metric.map(data.metric_display)
    st.plotly_chart(figures.bars(long, "label", "value", "metric", "Pointing game per model"),
                    key=f"{ctx.prefix}_pg")


def answer_rows(samples: pd.DataFrame, classes: list[str] | None = None) -> pd.DataFrame | None:
    """The parsed count beside the raw answer, one row per image and prompted class, of a model asked in words
    (``answer`` in classic records, ``counts`` with ``answers`` in the negative and multi-class tests, ``classes``
    in the order of those lists); None when the records hold no answers in words.

    Example:
        >>> answer_rows(pd.DataFrame({"image_id": ["a"], "counts": [[3.0, 0.0]], "answers": [["3", "none"]]}),
        ...             ["cats", "dogs"]).to_dict("records")[1]
        {'image_id': 'a', 'prompt': 'dogs', 'count': 0.0, 'answer': 'none'}
    """
    if "answer" in samples:  # classic keeps an answer that states no count, with its parse_error
        return samples[[c for c in ("image_id", "class_name", "gt", "count", "answer", "parse_error")
                        if c in samples]]
    if not {"answers", "counts"} <= set(samples.columns):
        return None
    rows = []
    for rec in samples.to_dict("records"):
        counts, answers = list(rec["counts"]), list(rec["answers"])
        names = classes if classes is not None and len(classes) == len(counts) else \
            [f"prompt {k + 1}" for k in range(len(counts))]
        head = {k: rec[k] for k in ("image_id", "class_name", "gt") if k in rec}
        rows += [{**head, "prompt": n, "count": c, "answer": a} for n, c, a in zip(names, counts, answers,
                                                                                   strict=True)]
    return pd.DataFrame(rows)


def draw_answers(ctx: Ctx, fig: FigureInfo) -> None:
    """Per image, what a model asked in words answered and the count read from it (``models.answers``)."""
    st.subheader("Answers in words")
    path = fig.get("samples", "samples.parquet")
    entry = pick_entry(ctx, "answers", runs_with(ctx, path))
    if entry is None:
        widgets.missing("per-image records", path)
        return
    source = data.first_with(ctx.entry_runs(entry), path)
    samples = data.read_table(source, path)
    classes_table = data.read_table(source, fig.get("classes")) if fig.get("classes") else None
    classes = list(classes_table.columns[3:]) if classes_table is not None else None
    rows = answer_rows(samples, classes) if samples is not None else None
    if rows is None:
        st.info(f"{md(ctx.labels.get(entry, entry))} was not asked in words: its records hold counts only. Models "
                "asked in words (model=vlm and its presets) show each raw answer beside its parsed count here; "
                "unparsable answers are in the run's failures.json.")
        return
    st.caption("The count read from each answer by the documented rule (docs/counters.md, \"Models asked in "
               "words\"); an answer that states no count is a failed unit, listed in the run's failures.json, "
               "except in the classic test, which keeps it here with its parse_error (scored by every convention).")
    st.dataframe(rows, hide_index=True, key=f"{ctx.prefix}_answers")


def draw_by_number(ctx: Ctx, fig: FigureInfo) -> None:
    """Exact-count accuracy per ground-truth number, per entry and, where the units name one, per generator."""
    st.subheader("Accuracy by ground-truth number")
    path = fig.get("table")
    table = stacked(ctx, path)
    if table.empty or not {"number", "accuracy", "low", "high"} <= set(table.columns):
        widgets.missing("accuracy-by-number table", path)
        return
    if "generator" in table:
        table = table.assign(label=table["label"] + " · " + table["generator"].astype(str))
    table = table.assign(number=[f"{v:g}" if v < 11 else "10+" for v in table["number"]])
    st.plotly_chart(figures.bars(table, "number", "accuracy", "label", "Exact-count accuracy by number",
                                 error=("low", "high")), key=f"{ctx.prefix}_by_number")


def draw_calibration(ctx: Ctx, fig: FigureInfo) -> None:
    """Coverage of BCC, CC and the human-only intervals at each nominal level, and their error against the number
    of labels, over replicate labelled subsets scored against every human label."""
    st.subheader("BCC against every human label")
    path = fig.get("table")
    entry = pick_entry(ctx, "calibration", runs_with(ctx, path))
    table = data.read_table(data.first_with(ctx.entry_runs(entry), path), path) if entry else None
    if table is None or not {"method", "n_human", "level", "coverage", "mae"} <= set(table.columns):
        widgets.missing("replicate calibration table (task.replicates > 0)", path)
        return
    sizes = sorted(int(n) for n in table["n_human"].unique())
    n = st.selectbox("Human-labelled units per replicate", sizes, index=len(sizes) // 2,
                     key=f"{ctx.prefix}_calibration_n")
    reps = int(table["replicates"].iloc[0]) if "replicates" in table else 0
    cols = st.columns(2)
    cols[0].plotly_chart(figures.calibration_chart(table[table["n_human"] == n],
                                                   f"Coverage, {n} labelled units, {reps} replicates"),
                         key=f"{ctx.prefix}_calibration")
    cols[1].plotly_chart(figures.error_chart(table.drop_duplicates(["method", "n_human"]), "Error vs labels"),
                         key=f"{ctx.prefix}_calibration_error")
