"""Runs page: search and filter every indexed run; each links to its page in the MLflow UI."""

from __future__ import annotations

import streamlit as st

import data
import queries
import widgets

MAX_ROWS = 2000


def details(run_id: str) -> None:
    """Metrics, params and tags of one run."""
    cols = st.columns(3)
    for col, (title, sql) in zip(cols, (("Metrics", queries.RUN_METRICS), ("Params", queries.RUN_PARAMS),
                                        ("Tags", queries.RUN_TAGS)), strict=True):
        col.markdown(f"**{title}**")
        col.dataframe(data.query(sql, (run_id,)), hide_index=True)


def main() -> None:
    st.title("Runs")
    if widgets.index_unusable():
        return
    facets = data.query(queries.RUN_FACETS)
    if facets.empty:
        widgets.launch_hint("The index has no runs yet.",
                            "-m model=<model_a>,<model_b> dataset=<dataset> task=<task>")
        return
    cols = st.columns([2, 1, 1])
    text = cols[0].text_input("Search (id, name, model, dataset, task, family)", key="runs_search")
    families = ["All", *sorted(facets.family.dropna().unique())]
    statuses = ["All", *sorted(facets.status.dropna().unique())]
    family = cols[1].selectbox("Family", families, key="runs_family")
    status = cols[2].selectbox("Status", statuses, key="runs_status")
    family = None if family == "All" else family
    status = None if status == "All" else status
    runs = data.query(queries.RUNS, (family, family, status, status, text.strip(), text.strip(), MAX_ROWS))
    runs.insert(0, "link", [data.run_url(e, r) for e, r in zip(runs.experiment_id, runs.run_id, strict=True)])
    st.caption(f"{len(runs)} runs" + (f" (first {MAX_ROWS})" if len(runs) == MAX_ROWS else "") +
               f"; links open the MLflow UI at {data.mlflow_ui_base()}.")
    st.dataframe(runs, hide_index=True, key="runs_table",
                 column_config={"link": st.column_config.LinkColumn("MLflow", display_text="open run")})
    if runs.empty:
        st.info("No runs match this search.")
        return
    picked = st.selectbox("Details of run", list(runs.run_id), key="runs_pick",
                          format_func=lambda r: f"{r[:8]} · {runs.set_index('run_id').loc[r, 'run_name']}")
    details(picked)


if __name__ == "__main__":
    main()
