"""Runs page: every indexed run, filtered by sweep, family, status or text; pick two or more to compare them side
by side (the params that differ, the metrics) here or in the MLflow UI's compare view; pick one run of a model
asked in words to read its raw answers beside the parsed counts."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import data
import queries
import widgets
from countboard.protocol import DEFAULT_LABEL
from countboard.tracking.tags import MISSING_METRICS

ALL = "All"
PAGE_KEY = "runs_page"


def compare(runs: pd.DataFrame) -> None:
    """Params that differ and every metric of the selected runs, one column per run."""
    ids = list(runs.run_id)
    names = {r.run_id: display_name(r.run_id, r.run_name, r.protocol) for r in runs.itertuples()}
    st.subheader(f"{len(ids)} runs side by side")
    st.link_button("Open in MLflow's compare view", data.compare_url(ids, list(runs.experiment_id)))
    params = data.query(queries.PARAMS_OF_RUNS, (ids,))
    metrics = data.query(queries.METRICS_OF_RUNS, (ids,))
    # one table under the other, each as wide as the page: side by side, the key column took half of a half-width
    # table and the runs' values were pushed out of sight
    per_run = {names[r]: st.column_config.Column(names[r], width="medium") for r in ids}
    if not params.empty:
        wide = params.pivot_table(index="key", columns="run_id", values="value", aggfunc="first")
        wide = wide.reindex(columns=ids).rename(columns=names)
        differ = wide[wide.nunique(axis=1, dropna=False) > 1]
        st.markdown(f"**Params that differ** ({len(differ)} of {len(wide)})")
        st.dataframe(differ.fillna(widgets.MISSING), key="runs_params_diff", column_config=per_run)
    if not metrics.empty:
        wide = metrics.pivot_table(index="key", columns="run_id", values="value", aggfunc="first")
        wide = wide.reindex(columns=ids).rename(columns=names)
        st.markdown("**Metrics**")
        # text, "—" where a run lacks the metric: the grid draws "None" for a missing number
        shown = wide.map(lambda v: widgets.format_value(v, ".4g"))
        per_run = {k: st.column_config.TextColumn(k, width="medium", alignment="right") for k in per_run}
        st.dataframe(shown, key="runs_metrics", column_config=per_run)


def display_name(run_id: str, name: str | None, protocol: str | None, with_id: bool = True) -> str:
    """A run's name with its protocol when the name does not carry it (runs named before protocols were), and
    the start of its id: two runs of one model and task with different protocols never read the same.

    Example:
        >>> display_name("0123456789", "cb · fsc147 · praco_mosaic", "mosaic=official")
        'cb · fsc147 · praco_mosaic · mosaic=official (012345)'
    """
    text = name if isinstance(name, str) and name else run_id[:8]
    if isinstance(protocol, str) and protocol not in ("", DEFAULT_LABEL) and protocol not in text:
        text += f" · {protocol}"
    return f"{text} ({run_id[:6]})" if with_id else text


def filters(facets: pd.DataFrame, ui=st) -> tuple:
    """The search text, sweep, family, status and whether sweeps' parents are shown (``ui``: ``st``, or a
    ``widgets.Peek`` that reads the values only)."""
    sweeps = data.query(queries.SWEEPS)
    labels = {ALL: "All runs"} | {r.run_id: f"{r.run_name or r.run_id[:8]} · {r.n_children} runs"
                                               + (f", {r.n_failed} failed" if r.n_failed else "")
                                  for r in sweeps.itertuples()}
    top = ui.columns([2, 2, 1, 1])
    text = top[0].text_input("Search", key="runs_search", placeholder="id, name, model, dataset, task, family").strip()
    sweep = top[1].selectbox("Sweep", list(labels), format_func=labels.get, key="runs_sweep",
                             help="A sweep's parent run: picked, the table lists its children.")
    family = top[2].selectbox("Family", [ALL, *sorted(facets.family.dropna().unique())], key="runs_family")
    status = top[3].selectbox("Status", [ALL, *sorted(facets.status.dropna().unique())], key="runs_status")
    show_sweeps = ui.toggle("Show the sweeps' parent runs", value=False, key="runs_show_sweeps",
                            help="A picked sweep always shows its parent run first.")
    none = lambda v: None if v == ALL else v  # noqa: E731
    return text, none(sweep), none(family), none(status), show_sweeps


def page_of_runs(params: tuple) -> tuple[pd.DataFrame, int, tuple[int, int]]:
    """The runs of the picked page (``widgets.PAGE_ROWS`` a page, in the query's order, read with LIMIT/OFFSET:
    the index sends only those), how many runs match the filters, and the page's row bounds."""
    rows = widgets.PAGE_ROWS
    page = max(1, int(st.session_state.get(PAGE_KEY) or 1))
    runs = data.query(queries.RUNS, (*params, rows, (page - 1) * rows))
    if runs.empty and page > 1:  # a filter left fewer pages than the one picked: show the last
        first = data.query(queries.RUNS, (*params, 1, 0))
        n = int(first["n_matching"].iloc[0]) if not first.empty else 0
        st.session_state[PAGE_KEY] = max(1, -(-n // rows))
        return page_of_runs(params)
    n_matching = int(runs["n_matching"].iloc[0]) if not runs.empty else 0
    bounds = widgets.page_bounds(n_matching, PAGE_KEY)
    return runs, n_matching, bounds


def main() -> None:
    st.title("Runs")
    if widgets.index_unusable():
        return
    facets = data.query(queries.RUN_FACETS)
    if facets.empty:
        widgets.launch_hint("The index has no runs yet.",
                            "-m model=<model_a>,<model_b> dataset=<dataset> task=<task>")
        return
    # the table is sent before the filters (drawn above it): the browser draws it first
    widgets.controls_then(lambda ui: filters(facets, ui), table_and_comparison, key="runs_controls")


def table_and_comparison(picked: tuple) -> None:
    """One page of the runs that pass the filters ``picked``, with their MLflow links; the runs selected in it
    compared below (two or more) or one run's answers in words."""
    text, sweep, family, status, show_sweeps = picked
    runs, n_matching, bounds = page_of_runs((show_sweeps, sweep, sweep, sweep, sweep, family, family, status, status,
                                             text, text))
    runs.insert(0, "link", data.run_urls(runs.experiment_id, runs.run_id))
    runs["run_name"] = [display_name(r.run_id, r.run_name, r.protocol, with_id=False) for r in runs.itertuples()]
    ui, why = data.mlflow_ui()
    st.caption(f"{n_matching:,} runs; links open the MLflow UI at {ui} ({why}). Select rows to compare them.")
    if not data.mlflow_ui_answers(ui):
        st.warning(f"No MLflow UI answers at {ui}: start it with `countboard mlflow-ui` (the links follow the "
                   "address it serves), or give its address with `countboard leaderboard --mlflow-ui URL`.")
    if runs.empty:
        st.info("No runs match this search.")
        return
    text = {"error": object, MISSING_METRICS: object}  # a missing value shows as an empty cell, not "None"
    shown = widgets.dashes(runs.drop(columns=["experiment_id", "n_matching"]).astype(text)
                           .fillna(dict.fromkeys(text, "")))
    event = widgets.table(shown, hide_index=True, key="runs_table", on_select="rerun", selection_mode="multi-row",
                          column_config={"link": st.column_config.LinkColumn("MLflow", display_text="open run",
                                                                             pinned=True),
                                         "run_name": st.column_config.TextColumn("run", pinned=True)})
    if widgets.after_first_table(PAGE_KEY):
        widgets.page_control(n_matching, PAGE_KEY, bounds)
    picked = runs.iloc[list(event.selection.rows)] if event and event.selection.rows else runs.iloc[:0]
    if len(picked) >= 2:
        compare(picked)
    elif len(picked) == 1:
        st.info("Select one more run to compare.")
        answers(picked.iloc[0].run_id)


def answers(run_id: str) -> None:
    """The raw answers of a model asked in words beside its parsed counts, for one picked run that has them."""
    import sections  # the figures' module: imported only when one run is picked
    samples = data.read_table(run_id, "samples.parquet")
    classes = data.read_table(run_id, "tables/negative_counts.parquet")
    rows = sections.answer_rows(samples, list(classes.columns[3:]) if classes is not None else None) \
        if samples is not None else None
    if rows is not None:
        st.subheader("Answers in words")
        st.caption("Each raw answer beside the count read from it (docs/counters.md, \"Models asked in words\"); "
                   "answers that state no count are failed units, in the run's failures.json.")
        st.dataframe(rows, hide_index=True, key="runs_answers")


if __name__ == "__main__":
    main()
