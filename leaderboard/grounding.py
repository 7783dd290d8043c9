"""Grounding page: per-model table, distributions of the per-sample grounding scores, pointing-game uncertainty.

The histogrammed columns are the family's metrics that also appear as columns of the runs' ``samples.parquet``;
the pointing-game panel shows the family's metrics whose key starts with ``pg_``.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

import data
import figures
import widgets

FAMILY = "grounding"
SAMPLES = "samples.parquet"
HISTOGRAM_LIMIT = 4
HISTOGRAM_TABLE = "tables/grounding_histograms.parquet"  # its `metric` column names the scores to draw
POINTING_PREFIX = "pg_"


def histogram_keys(df: pd.DataFrame) -> list[str]:
    """The scores the task histogrammed (the ``metric`` column of its histogram table), in its order."""
    ids = [r for run_ids in df.run_ids for r in run_ids]
    source = data.first_with(ids, HISTOGRAM_TABLE)
    table = data.read_table(source, HISTOGRAM_TABLE) if source else None
    return list(dict.fromkeys(table.metric)) if table is not None and "metric" in table else []


def histogram_section(df: pd.DataFrame, metric_keys: list[str], labels: dict[str, str]) -> None:
    st.subheader("Per-sample distributions")
    frames = []
    for entry, ids in zip(df.run_id, df.run_ids, strict=True):
        source = data.first_with(list(ids), SAMPLES)
        table = data.read_table(source, SAMPLES) if source else None
        if table is not None and not table.empty:
            frames.append(table.assign(label=labels[entry]))
    samples = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    cols = [k for k in histogram_keys(df) if k in samples.columns] or \
        [k for k in metric_keys if k in samples.columns][:HISTOGRAM_LIMIT]
    if not cols:
        widgets.missing("per-sample grounding scores", SAMPLES)
        return
    panels = st.columns(min(len(cols), 2))
    for i, col in enumerate(cols):
        panels[i % len(panels)].plotly_chart(
            figures.histograms(samples, col, "label", data.metric_display(col)), key=f"gr_hist_{col}")


def pointing_section(df: pd.DataFrame, metric_keys: list[str], labels: dict[str, str]) -> None:
    """Pointing-game shares (``pg_*`` metrics with values in [0, 1]) per model."""
    st.subheader("Pointing game and its uncertainty")
    keys = [k for k in metric_keys if k.startswith(POINTING_PREFIX) and k in df and df[k].notna().any()
            and df[k].dropna().between(0, 1).all()]
    if not keys:
        st.info(f"No pointing-game share (`{POINTING_PREFIX}*` in [0, 1]) in these runs.")
        return
    long = df.assign(label=df.run_id.map(labels)).melt(id_vars=["label"], value_vars=keys, var_name="metric")
    long["metric"] = long.metric.map(data.metric_display)
    st.plotly_chart(figures.bars(long, "label", "value", "metric", "Pointing game per model"), key="gr_pg")


def main() -> None:
    metrics = widgets.family_header(FAMILY)
    if metrics is None:
        return
    filters = widgets.filters(FAMILY, "gr")
    sort, shown = widgets.metric_picker(FAMILY, metrics, "gr")
    keys = [m.key for m in metrics if m.family == FAMILY]
    df = data.ranking(FAMILY, sort, filters, latest_only=True, columns=[m.key for m in shown] + keys)
    if df.empty:
        st.info("No runs match these filters.")
        return
    widgets.show_ranking(df, shown, sort, key="gr_ranking")
    labels = {r: f"{m} · {d}" for r, m, d in zip(df.run_id, df.model, df.dataset, strict=True)}
    histogram_section(df, keys, labels)
    pointing_section(df, keys, labels)


if __name__ == "__main__":
    main()
