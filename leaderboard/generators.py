"""Generators page: one section per schema family whose models are generators (the GeckoNum human study,
auto-evaluated success with BCC correction…).

Each section ranks the family's runs and, where the schema gives the main metric an interval (``<main>_low`` /
``<main>_high``, ``<main>_ci_low`` / ``<main>_ci_high``, or the same on ``<main>`` without ``_mean``), draws the
estimates with their intervals beside the family's sibling estimates (keys that differ from the main metric in one
word, e.g. CC beside BCC), the pairwise P(A > B) and, when runs name several evaluators, the rank stability across
them. Number confusion matrices and per-prompt-type accuracy come from the runs' Parquet artifacts.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import streamlit as st
from scipy import stats

import data
import figures
import widgets
from countboard.schema import MetricInfo, load_schema

GENERATOR_KIND = "generator"
CONFUSION_TABLES = ("tables/confusion.parquet", "tables/human_confusion.parquet")
SAMPLES = "samples.parquet"
DRAWS_ARRAY = "arrays/bcc_draws.npz"
POOLED_CELL = "all"
PROMPT_TYPE_VALUES = ("bcc_rate", "bcc_mean", "accuracy", "cc_rate")
PROMPT_TYPE_TABLE = "tables/per_prompt_type.parquet"
_LEVEL = re.compile(r"(\d{2}(?:\.\d+)?)%\s+(?:[\w-]+\s+){0,3}interval")
INTERVAL_SUFFIXES = (("_low", "_high"), ("_ci_low", "_ci_high"), ("_lo", "_hi"))


def generator_families() -> list[str]:
    """Schema families whose model kinds include generators, in schema order."""
    return [f.key for f in load_schema().families.values() if GENERATOR_KIND in f.model_kinds]


def interval_keys(keys: list[str], main: str) -> tuple[str, str] | None:
    """The (low, high) metric keys of ``main``'s interval, None if the schema declares none.

    Example:
        >>> interval_keys(["acs_bcc_mean", "acs_bcc_low", "acs_bcc_high"], "acs_bcc_mean")
        ('acs_bcc_low', 'acs_bcc_high')
    """
    for stem in dict.fromkeys((main, main.removesuffix("_mean"))):
        for lo, hi in INTERVAL_SUFFIXES:
            if stem + lo in keys and stem + hi in keys:
                return stem + lo, stem + hi
    return None


def siblings(keys: list[str], main: str, interval: tuple[str, str]) -> list[str]:
    """Keys with as many words as ``main`` that differ from it in exactly one word (``cc`` for ``bcc``…).

    Example:
        >>> siblings(["a_bcc_rate", "a_cc_rate", "a_bcc_rate_low", "a_n_images"], "a_bcc_rate", ("a_bcc_rate_low", "x"))
        ['a_cc_rate']
    """
    words = main.split("_")
    out = []
    for k in keys:
        other = k.split("_")
        if k in (main, *interval) or len(other) != len(words):
            continue
        if sum(a != b for a, b in zip(words, other, strict=True)) == 1:
            out.append(k)
    return out


def interval_level(low_key: str, default: float = 0.90) -> float:
    """The level of an interval, read from its lower bound's schema description ("… 95% credible interval …").

    Example:
        >>> interval_level("acs_bcc_low")  # "Lower end of the equal-tailed 90% credible interval …"  # doctest: +SKIP
        0.9
    """
    info = load_schema().metrics.get(low_key)
    match = _LEVEL.search(info.description) if info else None
    return float(match.group(1)) / 100 if match else default


def read_draws(run_ids: list[str]) -> np.ndarray | None:
    """Posterior draws of the pooled success rate from an entry's ``arrays/bcc_draws.npz``, if it has one."""
    source = data.first_with(run_ids, DRAWS_ARRAY)
    arrays = data.read_arrays(source, DRAWS_ARRAY) if source else None
    if not arrays or "p" not in arrays or "cells" not in arrays:
        return None
    cells = [str(c) for c in arrays["cells"]]
    return np.asarray(arrays["p"])[cells.index(POOLED_CELL)] if POOLED_CELL in cells else None


def family_section(family: str) -> None:
    fam = data.family(family)
    st.header(data.family_title(family))
    if fam and fam.description:
        st.caption(fam.description)
    metrics = data.view_metrics(family)
    if not metrics or data.choices(family).empty:
        widgets.empty_state(family)
        return
    prefix = f"gen_{family}"
    filters = widgets.filters(family, prefix)
    sort, shown = widgets.metric_picker(family, metrics, prefix)
    df = data.ranking(family, sort, filters, latest_only=True)
    if df.empty:
        st.info("No runs match these filters.")
        return
    df = df.assign(evaluator=df.evaluator.fillna("—"))
    evaluators = list(dict.fromkeys(df.evaluator))
    widgets.show_ranking(df, shown, sort, extra=("evaluator",) if evaluators != ["—"] else (),
                         key=f"{prefix}_ranking")
    keys = [m.key for m in metrics]
    interval = interval_keys(keys, sort.key)
    if interval is not None:
        interval_section(df, sort, interval, siblings(keys, sort.key, interval), prefix)
    if len(evaluators) > 1:
        stability_section(df, sort, prefix)
    labels = {r: f"{m} · {e}" if e != "—" else str(m) for r, m, e in zip(df.run_id, df.model, df.evaluator,
                                                                           strict=True)}
    prompt_type_section(df, labels, prefix)
    confusion_section(df, labels, prefix)


def interval_section(df: pd.DataFrame, sort: MetricInfo, interval: tuple[str, str], beside: list[str],
                     prefix: str) -> None:
    low, high = interval
    point = beside[0] if beside else None
    names = (sort.display, data.metric_display(point) if point else "")
    st.plotly_chart(figures.interval_chart(df, "model", sort.key, low, high, point, "evaluator",
                                           f"{sort.display} with its interval", names=names),
                    key=f"{prefix}_intervals")
    st.subheader("Pairwise P(A > B)")
    evaluators = list(dict.fromkeys(df.evaluator))
    ev = st.selectbox("Evaluator", evaluators, key=f"{prefix}_pair_eval") if len(evaluators) > 1 else evaluators[0]
    part = df[df.evaluator == ev].dropna(subset=[sort.key, low, high]).drop_duplicates("model")
    if len(part) < 2:
        st.info("Pairwise probabilities need at least two generators with an interval.")
        return
    draws = [read_draws(list(ids)) for ids in part.run_ids]
    if all(d is not None for d in draws):
        n = min(len(d) for d in draws)
        p = figures.prob_greater_draws(np.stack([d[:n] for d in draws]))
        how = f"Share of {n} posterior draws (arrays/bcc_draws.npz) in which A's rate is higher; runs independent."
    else:
        level = interval_level(low)
        z = float(stats.norm.ppf(0.5 + level / 2))
        p = figures.prob_greater_normal(part[sort.key].to_numpy(), part[low].to_numpy(), part[high].to_numpy(), z)
        how = (f"Each estimate taken as normal with the spread of its {level:.0%} interval (level from the schema); "
               "estimates independent.")
    if sort.higher_is_better is False:
        p = p.T
    st.plotly_chart(figures.pairwise_heatmap(p, list(part.model), f"P(A better than B) by {sort.display}"),
                    key=f"{prefix}_pairwise")
    st.caption(how)


def stability_section(df: pd.DataFrame, sort: MetricInfo, prefix: str) -> None:
    st.subheader("Rank stability across evaluators")
    r = figures.ranks(df.dropna(subset=[sort.key]), "model", "evaluator", sort.key, sort.higher_is_better is not False)
    cols = st.columns(2)
    cols[0].plotly_chart(figures.rank_chart(r, "model", "evaluator", f"Rank by {sort.display}"),
                         key=f"{prefix}_ranks")
    cols[1].markdown("Kendall's τ between evaluators' rankings")
    cols[1].dataframe(figures.kendall_between(r, "model", "evaluator").round(3), key=f"{prefix}_tau")


def prompt_type_section(df: pd.DataFrame, labels: dict[str, str], prefix: str) -> None:
    st.subheader("Success per prompt type")
    frames = []
    for entry, ids in zip(df.run_id, df.run_ids, strict=True):
        source = data.first_with(list(ids), PROMPT_TYPE_TABLE)
        table = data.read_table(source, PROMPT_TYPE_TABLE) if source else None
        if table is not None and not table.empty:
            frames.append(table.assign(label=labels[entry]))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    value = next((c for c in PROMPT_TYPE_VALUES if c in table.columns and table[c].notna().any()), None)
    if value is None or "prompt_type" not in table.columns:
        widgets.missing("per-prompt-type success", PROMPT_TYPE_TABLE)
        return
    bounds = [("ci_low", "ci_high")]
    if value.endswith("_rate"):
        bounds.insert(0, (value.replace("_rate", "_low"), value.replace("_rate", "_high")))
    error = next((b for b in bounds if set(b) <= set(table.columns)), None)
    st.plotly_chart(figures.bars(table, "prompt_type", value, "label", f"{value} per prompt type", error=error),
                    key=f"{prefix}_types")


def confusion_table(run_ids: list[str]) -> tuple[pd.DataFrame | None, str]:
    """Requested × counted numbers from the entry's per-image records, else its label confusion table."""
    source = data.first_with(run_ids, SAMPLES)
    samples = data.read_table(source, SAMPLES) if source else None
    if samples is not None and {"targets", "evaluator_counts"} <= set(samples.columns):
        return figures.number_confusion(samples.targets, samples.evaluator_counts), "requested × counted number"
    for path in CONFUSION_TABLES:
        source = data.first_with(run_ids, path)
        if source:
            return data.read_table(source, path), path.removeprefix("tables/").removesuffix(".parquet")
    return None, ""


def confusion_section(df: pd.DataFrame, labels: dict[str, str], prefix: str) -> None:
    st.subheader("Confusion matrix")
    have = set(data.artifacts([r for ids in df.run_ids for r in ids], "tables/").path)
    entries = list(df.run_id)
    if have & set(CONFUSION_TABLES):  # only some entries (e.g. GeckoNum Task 1) have a confusion table
        with_table = set(data.artifacts([r for ids in df.run_ids for r in ids], "tables/")
                         .query("path in @CONFUSION_TABLES").run_id)
        entries = [e for e, ids in zip(df.run_id, df.run_ids, strict=True) if with_table & set(ids)]
    entry = st.selectbox("Entry", entries, format_func=lambda r: labels.get(r, r), key=f"{prefix}_conf_run")
    table, what = confusion_table(list(df.set_index("run_id").loc[entry, "run_ids"]))
    if table is None or table.empty or table.shape[1] < 3:
        widgets.missing("confusion matrix", f"{SAMPLES} (targets, evaluator_counts) or {' / '.join(CONFUSION_TABLES)}")
        return
    rows, cols, value = table.columns[0], table.columns[1], table.columns[-1]
    top = float(np.nanmax(table[value].to_numpy(dtype=float)))
    st.plotly_chart(figures.matrix_heatmap(table, rows, cols, value, f"{labels.get(entry, entry)}: {what}",
                                           zmin=0, zmax=top or None), key=f"{prefix}_confusion")


def main() -> None:
    st.title("Generators")
    families = generator_families()
    if not families:
        st.info("No family in countboard/schema/*.yaml has generator models; declare one to fill this page.")
        return
    for family in families:
        family_section(family)


if __name__ == "__main__":
    main()
