"""Overview page (the app's home): the best entry of each family with its interval, the store's state (runs, last
sweep, failed runs with their error) and what to launch when a family is empty."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import data
import queries
import widgets
from countboard.schema import FamilyInfo, load_schema

FAILED_SHOWN = 20
PAGE_FILE = "pages/{page}.py"


def best_entry(fam: FamilyInfo) -> tuple[pd.Series, str] | None:
    """The top entry of the family by its main metric (first dataset/split in the ranking) and its value text."""
    metrics = data.view_metrics(fam.key)
    main = next((m for m in metrics if m.key == fam.main_metric), None)
    if main is None:
        return None
    interval = data.interval_of(main, metrics)
    cols = [main.key] + ([interval.low, interval.high] if interval else [])
    df = data.ranking(fam.key, main, data.Filters(include_partial=False), latest_only=True, columns=cols)
    df = df.dropna(subset=[main.key]) if not df.empty else df
    if df.empty:
        return None
    top = df.iloc[0]
    text = f"{main.display} {format(top[main.key], main.fmt or '.3f')}"
    if interval is not None and pd.notna(top[interval.low]) and pd.notna(top[interval.high]):
        text += (f" [{format(top[interval.low], main.fmt or '.3f')}, {format(top[interval.high], main.fmt or '.3f')}]"
                 f" ({interval.level:.0%} interval)")
    return top, text


def family_card(fam: FamilyInfo, n: int) -> None:
    with st.container(border=True):
        label = f"{fam.display}: {n} finished run{'s' if n != 1 else ''}"
        if fam.page:
            st.page_link(PAGE_FILE.format(page=fam.page), label=label, query_params={"section": fam.key})
        else:
            st.markdown(f"**{label}**")
        best = best_entry(fam) if n else None
        if best is None:
            kinds = ", ".join(fam.model_kinds) or "any"
            st.caption(f"Empty: launch a sweep of {kinds} models, e.g. `countboard-sweep -m model=<a>,<b> "
                       f"dataset=<dataset> task=<task>`, then `countboard index`.")
            return
        top, text = best
        where = " · ".join(str(top[c]) for c in ("dataset", "split", "evaluator", "task")
                           if c in top and pd.notna(top[c]))
        st.markdown(f"Best: **{top.model}** — {text}  \n{where} · [run]({data.run_url(top.experiment_id, top.run_id)})")


def store_state() -> None:
    st.subheader("Store")
    state = data.query(queries.STORE_STATE)
    if state.empty:
        return
    s = state.iloc[0]
    cols = st.columns(5)
    for col, (label, value) in zip(cols, (("Runs", s.n_runs), ("Finished", s.n_finished), ("Failed", s.n_failed),
                                          ("Running", s.n_running), ("Sweeps", s.n_sweeps)), strict=True):
        col.metric(label, int(value or 0))
    last = s.last_sweep if pd.notna(s.last_sweep) else s.last_run
    meta = data.query(queries.META)
    info = dict(zip(meta.key, meta.value, strict=True)) if not meta.empty else {}
    st.caption(f"Last sweep started {last if pd.notna(last) else 'never'}. Store `{info.get('store_uri')}`, "
               f"indexed {info.get('indexed_at')} (index schema {info.get('schema_version')}); refresh with "
               "`countboard index`.")
    failed = data.query(queries.FAILED_RUNS, (FAILED_SHOWN,))
    if not failed.empty:
        failed.insert(0, "link", [data.run_url(e, r) for e, r in zip(failed.experiment_id, failed.run_id,
                                                                      strict=True)])
        st.markdown(f"**Failed runs** (latest {min(len(failed), FAILED_SHOWN)}; the error tag of each)")
        st.dataframe(failed.drop(columns=["experiment_id"]).fillna(widgets.MISSING), hide_index=True,
                     key="ov_failed", column_config={
                         "link": st.column_config.LinkColumn("MLflow", display_text="open run"),
                         "error": st.column_config.TextColumn("error", width="large")})


def main() -> None:
    st.title("Countboard")
    st.caption("Counting-centred evaluation of vision and vision-language models, read from the DuckDB index of "
               "the MLflow store.")
    if widgets.index_unusable():
        return
    counts = data.query(queries.FAMILY_COUNTS)
    if counts.empty:
        widgets.launch_hint("The index has no finished runs yet.",
                            "-m model=<model_a>,<model_b> dataset=<dataset> task=<task>")
    by_family = dict(zip(counts.family, counts.n, strict=True)) if not counts.empty else {}
    fams = [f for f in load_schema().families.values() if f.page]
    cols = st.columns(2)
    for i, fam in enumerate(fams):
        with cols[i % 2]:
            family_card(fam, int(by_family.get(fam.key, 0)))
    store_state()


if __name__ == "__main__":
    main()
