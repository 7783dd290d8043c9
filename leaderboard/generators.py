"""Generators page: one section per schema family whose models are generators (the GeckoNum human study,
auto-evaluated success with BCC correction…).

Each section ranks the family's runs and, where the schema gives the main metric an interval (``<main>_low`` /
``<main>_high``, ``<main>_ci_low`` / ``<main>_ci_high``, or the same on ``<main>`` without ``_mean``), draws the
estimates with their intervals beside the family's sibling estimates (keys that differ from the main metric in one
word, e.g. CC beside BCC), the pairwise P(A > B) and, when runs name several evaluators, the rank stability across
them. Number confusion matrices and per-prompt-type accuracy come from the runs' Parquet artifacts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import data
import figures
import widgets
from countboard.schema import MetricInfo, load_schema

GENERATOR_KIND = "generator"
EVALUATOR_TAG = "evaluator"
EVALUATOR_PARAMS = ("evaluator.name", "task.evaluator", "evaluator")
CONFUSION_TABLE = "tables/confusion.parquet"
PROMPT_TYPE_TABLE = "tables/per_prompt_type.parquet"
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


def with_evaluator(df: pd.DataFrame) -> pd.DataFrame:
    """Add an ``evaluator`` column from the runs' ``evaluator`` tag or evaluator param ("—" when none)."""
    ids = list(df.run_id)
    found = pd.Series(df.run_id.map(data.run_tag(ids, EVALUATOR_TAG)), index=df.index, dtype=object)
    for key in EVALUATOR_PARAMS:
        found = found.fillna(df.run_id.map(data.run_param(ids, key)))
    return df.assign(evaluator=found.fillna("—"))


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
    df = data.ranking(family, sort, filters, latest_only=False)
    if df.empty:
        st.info("No runs match these filters.")
        return
    df = with_evaluator(df)
    df = df.sort_values("evaluator", kind="stable").drop_duplicates(["model", "dataset", "split", "evaluator"])
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
    p = figures.prob_greater_normal(part[sort.key].to_numpy(), part[low].to_numpy(), part[high].to_numpy())
    if sort.higher_is_better is False:
        p = p.T
    st.plotly_chart(figures.pairwise_heatmap(p, list(part.model), f"P(A better than B) by {sort.display}"),
                    key=f"{prefix}_pairwise")
    st.caption("Each estimate taken as normal with the spread of its interval (read as 90%); estimates independent.")


def stability_section(df: pd.DataFrame, sort: MetricInfo, prefix: str) -> None:
    st.subheader("Rank stability across evaluators")
    r = figures.ranks(df.dropna(subset=[sort.key]), "model", "evaluator", sort.key, sort.higher_is_better is not False)
    cols = st.columns(2)
    cols[0].plotly_chart(figures.rank_chart(r, "model", "evaluator", f"Rank by {sort.display}"),
                         key=f"{prefix}_ranks")
    cols[1].markdown("Kendall's τ between evaluators' rankings")
    cols[1].dataframe(figures.kendall_between(r, "model", "evaluator").round(3), key=f"{prefix}_tau")


def prompt_type_section(df: pd.DataFrame, labels: dict[str, str], prefix: str) -> None:
    table = data.read_tables(list(df.run_id), PROMPT_TYPE_TABLE, labels)
    value = next((c for c in ("accuracy", "acc", "mean") if c in table.columns), None)
    kind = next((c for c in ("prompt_type", "type", "category") if c in table.columns), None)
    st.subheader("Accuracy per prompt type")
    if value is None or kind is None:
        widgets.missing("per-prompt-type accuracy", PROMPT_TYPE_TABLE)
        return
    st.plotly_chart(figures.bars(table, kind, value, "label", "Accuracy per prompt type"), key=f"{prefix}_types")


def confusion_section(df: pd.DataFrame, labels: dict[str, str], prefix: str) -> None:
    st.subheader("Number confusion matrix")
    with_table = data.artifacts(list(df.run_id), CONFUSION_TABLE)
    if with_table.empty:
        widgets.missing("number confusion matrix", CONFUSION_TABLE)
        return
    ids = list(dict.fromkeys(with_table.run_id))
    run_id = st.selectbox("Run", ids, format_func=lambda r: labels.get(r, r), key=f"{prefix}_conf_run")
    table = data.read_table(run_id, CONFUSION_TABLE)
    if table is None or table.empty or table.shape[1] < 3:
        widgets.missing("number confusion matrix", CONFUSION_TABLE)
        return
    rows, cols, value = table.columns[0], table.columns[1], table.columns[-1]
    top = float(np.nanmax(table[value].to_numpy(dtype=float)))
    st.plotly_chart(figures.matrix_heatmap(table, rows, cols, value, f"{labels.get(run_id, run_id)}: {rows} × {cols}",
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
