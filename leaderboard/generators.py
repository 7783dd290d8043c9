"""Generators page: BCC-corrected success with intervals next to CC per evaluator, pairwise P(A > B), rank
stability across evaluators, number confusion matrices, per-prompt-type accuracy and the GeckoNum human study.

Which metrics hold the estimate and its interval is derived from the schema: the ``acs`` family's main metric
``<base>_mean`` with ``<base>_low`` / ``<base>_high``; the family's other ``*_mean`` metrics without an interval are
drawn beside it as uncorrected estimates.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import data
import figures
import widgets
from countboard.schema import MetricInfo

ACS = "acs"
GENERATORS = "generators"
GENERATOR_TAGS = ("generator", "model")
EVALUATOR_TAGS = ("evaluator", "evaluator_model")
HUMAN_KIND = "human"
CONFUSION_TABLE = "tables/confusion.parquet"
PROMPT_TYPE_TABLE = "tables/per_prompt_type.parquet"


def interval_keys(metrics: list[MetricInfo], main: str) -> tuple[str, str, str, list[str]] | None:
    """(mean, low, high, uncorrected means) for ``main`` = ``<base>_mean`` when low/high exist, else None."""
    keys = {m.key for m in metrics}
    base = main.removesuffix("_mean")
    low, high = f"{base}_low", f"{base}_high"
    if main not in keys or low not in keys or high not in keys:
        return None
    others = [m.key for m in metrics if m.key.endswith("_mean") and m.key != main
              and f"{m.key.removesuffix('_mean')}_low" not in keys]
    return main, low, high, others


def with_roles(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``generator`` and ``evaluator`` columns from the runs' tags (falling back to the model tag)."""
    ids = list(df.run_id)
    out = df.copy()
    for col, tags in (("generator", GENERATOR_TAGS), ("evaluator", EVALUATOR_TAGS)):
        values = pd.Series([None] * len(out), index=out.index, dtype=object)
        for tag in tags:
            found = data.run_tag(ids, tag)
            values = values.fillna(out.run_id.map(found))
        out[col] = values.fillna(out.model if col == "generator" else "—")
    return out


def acs_sections() -> None:
    metrics = data.view_metrics(ACS)
    fam = data.family(ACS)
    if not metrics or fam is None or data.choices(ACS).empty:
        widgets.empty_state(ACS)
        return
    st.header(fam.display)
    if fam.description:
        st.caption(fam.description)
    filters = widgets.filters(ACS, "acs")
    sort, shown = widgets.metric_picker(ACS, metrics, "acs")
    df = data.ranking(ACS, sort, filters, latest_only=False)
    if df.empty:
        st.info("No runs match these filters.")
        return
    df = with_roles(df)
    df = df.sort_values(["evaluator"], kind="stable")
    widgets.show_ranking(df.assign(model=df.generator), shown, sort, extra=("evaluator",), key="acs_ranking")
    keys = interval_keys(metrics, fam.main_metric)
    if keys is None:
        st.info(f"The schema declares no interval for {fam.main_metric!r} (`<base>_low` / `<base>_high`).")
        return
    mean, low, high, others = keys
    names = (data.metric_display(mean), data.metric_display(others[0]) if others else "")
    st.plotly_chart(figures.interval_chart(df, "generator", mean, low, high, others[0] if others else None,
                                           "evaluator", "Success rate per generator and evaluator (90% interval)",
                                           names=names), key="acs_intervals")
    pairwise_section(df, mean, low, high)
    stability_section(df, sort)


def pairwise_section(df: pd.DataFrame, mean: str, low: str, high: str) -> None:
    st.subheader("Pairwise P(A > B)")
    evaluators = list(dict.fromkeys(df.evaluator))
    ev = st.selectbox("Evaluator", evaluators, key="acs_pair_eval")
    part = df[df.evaluator == ev].dropna(subset=[mean, low, high]).drop_duplicates("generator")
    if len(part) < 2:
        st.info("Pairwise probabilities need at least two generators scored by this evaluator.")
        return
    p = figures.prob_greater_normal(part[mean].to_numpy(), part[low].to_numpy(), part[high].to_numpy())
    st.plotly_chart(figures.pairwise_heatmap(p, list(part.generator), f"P(A > B) under {ev}"), key="acs_pairwise")
    st.caption("Each estimate taken as normal with the spread of its 90% interval; differences independent.")


def stability_section(df: pd.DataFrame, sort: MetricInfo) -> None:
    st.subheader("Rank stability across evaluators")
    if df.evaluator.nunique() < 2:
        st.info("Rank stability needs runs scored by at least two evaluators.")
        return
    r = figures.ranks(df.dropna(subset=[sort.key]).drop_duplicates(["generator", "evaluator"]), "generator",
                      "evaluator", sort.key, sort.higher_is_better is not False)
    cols = st.columns(2)
    cols[0].plotly_chart(figures.rank_chart(r, "generator", "evaluator", f"Rank by {sort.display}"),
                         key="acs_ranks")
    cols[1].markdown("Kendall's τ between evaluators' rankings")
    cols[1].dataframe(figures.kendall_between(r, "generator", "evaluator").round(3))


def generator_sections() -> None:
    metrics = data.view_metrics(GENERATORS)
    fam = data.family(GENERATORS)
    if not metrics or fam is None or data.choices(GENERATORS).empty:
        widgets.empty_state(GENERATORS)
        return
    st.header(fam.display)
    if fam.description:
        st.caption(fam.description)
    filters = widgets.filters(GENERATORS, "gen")
    sort, shown = widgets.metric_picker(GENERATORS, metrics, "gen")
    df = data.ranking(GENERATORS, sort, filters, latest_only=True)
    if df.empty:
        st.info("No runs match these filters.")
        return
    human = df.model_kind == HUMAN_KIND
    widgets.show_ranking(df[~human], shown, sort, key="gen_ranking")
    labels = {r: f"{m} · {d}" for r, m, d in zip(df.run_id, df.model, df.dataset, strict=True)}
    prompt_type_section(df[~human], labels)
    confusion_section(df[~human], labels)
    st.subheader("GeckoNum human study")
    if not human.any():
        st.info(f"No run of model kind `{HUMAN_KIND}` yet: import the GeckoNum human annotations as a run "
                "(see docs/leaderboard.md).")
        return
    widgets.show_ranking(df[human], shown, sort, key="gen_human")
    prompt_type_section(df[human], labels, key="gen_human_types")


def prompt_type_section(df: pd.DataFrame, labels: dict[str, str], key: str = "gen_types") -> None:
    st.subheader("Accuracy per prompt type")
    table = data.read_tables(list(df.run_id), PROMPT_TYPE_TABLE, labels)
    value = next((c for c in ("accuracy", "acc", "mean") if c in table.columns), None)
    kind = next((c for c in ("prompt_type", "type", "category") if c in table.columns), None)
    if value is None or kind is None:
        widgets.missing("per-prompt-type accuracy", PROMPT_TYPE_TABLE)
        return
    st.plotly_chart(figures.bars(table, kind, value, "label", "Accuracy per prompt type"), key=key)


def confusion_section(df: pd.DataFrame, labels: dict[str, str]) -> None:
    st.subheader("Number confusion matrix")
    if df.empty:
        return
    run_id = st.selectbox("Run", list(df.run_id), format_func=labels.get, key="gen_conf_run")
    table = data.read_table(run_id, CONFUSION_TABLE)
    if table is None or table.empty:
        widgets.missing("confusion matrix", CONFUSION_TABLE)
        return
    cols = list(table.columns)
    value = cols[-1]
    fig = figures.matrix_heatmap(table, cols[0], cols[1], value, f"{labels[run_id]}: {cols[0]} × {cols[1]}",
                                 zmin=0, zmax=float(np.nanmax(table[value])) or None)
    st.plotly_chart(fig, key="gen_confusion")


def main() -> None:
    st.title("Generators")
    generator_sections()
    acs_sections()


if __name__ == "__main__":
    main()
