"""Overview page (the app's home): the best entry of each family with its interval, the store's state (runs, last
sweep, failed runs with their error) and what to launch when a family is empty."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import data
import queries
import widgets
from countboard.escaping import md, md_code
from countboard.schema import FamilyInfo, load_schema

FAILED_SHOWN = 20
PAGE_FILE = "views/{page}.py"


def best_entry(fam: FamilyInfo) -> tuple[pd.Series, str, int] | None:
    """The top entry of the family by its main metric (first dataset/split in the ranking), its value text and how
    many entries the family's page ranks by default (complete runs only, as the page shows them)."""
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
    n_entries = len(df)
    clean = df[df[data.FAILED_COLUMN].fillna(0) == 0] if data.FAILED_COLUMN in df else df
    top = (clean if not clean.empty else df).iloc[0]  # an entry with failed units is best only when no clean one is
    text = f"{main.display} {format(top[main.key], main.fmt or '.3f')}"
    if interval is not None and pd.notna(top[interval.low]) and pd.notna(top[interval.high]):
        text += (f" [{format(top[interval.low], main.fmt or '.3f')}, {format(top[interval.high], main.fmt or '.3f')}]"
                 f" ({interval.level:.0%} interval)")
    return top, text, n_entries


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def hidden_note(counts: dict) -> str:
    """What the family's page does not rank: smoke runs, failed runs; and complete runs that lost units.

    Example:
        >>> hidden_note({"n_partial": 4, "n_failed": 1, "n_with_failed_units": 0})
        '4 smoke (partial) runs hidden: the page shows them with "Include partial (smoke) runs". 1 failed run not ranked (see Runs).'
    """
    notes = []
    if counts.get("n_partial"):
        notes.append(f"{_plural(counts['n_partial'], 'smoke (partial) run')} hidden: the page shows them with "
                     '"Include partial (smoke) runs".')
    if counts.get("n_failed"):
        notes.append(f"{_plural(counts['n_failed'], 'failed run')} not ranked (see Runs).")
    if counts.get("n_with_failed_units"):
        notes.append(f"{_plural(counts['n_with_failed_units'], 'ranked run')} with failed units, ranked on the units "
                     "they scored.")
    return " ".join(notes)


def family_card(fam: FamilyInfo, counts: dict) -> None:
    """The family's link, labelled with the entries its page ranks, the best of them and what the page hides."""
    n = int(counts.get("n", 0))
    best = best_entry(fam) if n else None
    with st.container(border=True):
        k = best[2] if best else 0
        label = f"{fam.display}: {k} {'entry' if k == 1 else 'entries'}"  # a link label does not wrap: keep it short
        if fam.page:
            st.page_link(PAGE_FILE.format(page=fam.page), label=label, query_params={"section": fam.key})
        else:
            st.markdown(f"**{label}**")
        note = ((f"Ranked from {_plural(n, 'complete finished run')}. " if n else "") + hidden_note(counts)).strip()
        if best is None:
            kinds = ", ".join(fam.model_kinds) or "any"
            lead = "No complete run yet." if counts.get("n_partial") or counts.get("n_failed") else "Empty:"
            note = hidden_note(counts)
            sweep, index = widgets.store_args()
            st.caption(f"{lead} {note} Launch a sweep of {kinds} models, e.g. `countboard-sweep -m model=<a>,<b> "
                       f"dataset=<dataset> task=<task> {sweep}`, then `countboard index {index}`.".replace("  ", " "))
            return
        top, text, _ = best
        where = " · ".join(md(top[c]) for c in ("dataset", "split", "evaluator", "task", data.PROTOCOL_COLUMN)
                           if c in top and pd.notna(top[c]))
        if data.FAILED_COLUMN in top and pd.notna(top[data.FAILED_COLUMN]) and top[data.FAILED_COLUMN] > 0:
            where += f" · {widgets.failed_text(top[data.FAILED_COLUMN], top.failed_share)} units failed"
        st.markdown(f"Best: **{md(top.model)}** — {text}  \n{where} · [run]({data.run_url(top.experiment_id, top.run_id)})")
        if note:
            st.caption(note)


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
    st.caption(f"Last sweep started {last if pd.notna(last) else 'never'}. Store {md_code(info.get('store_uri'))}, "
               f"indexed {info.get('indexed_at')} (index schema {info.get('schema_version')}); refresh with "
               "`countboard index`.")
    failed = data.query(queries.FAILED_RUNS, (FAILED_SHOWN,))
    if not failed.empty:
        failed.insert(0, "link", data.run_urls(failed.experiment_id, failed.run_id))
        st.markdown(f"**Failed runs** (latest {min(len(failed), FAILED_SHOWN)}; the error tag of each)")
        st.dataframe(widgets.dashes(failed.drop(columns=["experiment_id"])), hide_index=True,
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
    if counts.empty or not counts.n.sum():
        widgets.launch_hint("The index has no complete finished run yet.",
                            "-m model=<model_a>,<model_b> dataset=<dataset> task=<task>")
    by_family = {row["family"]: row for row in counts.to_dict("records")} if not counts.empty else {}
    fams = [f for f in load_schema().families.values() if f.page]
    cols = st.columns(2)
    for i, fam in enumerate(fams):
        with cols[i % 2]:
            family_card(fam, by_family.get(fam.key, {}))
    store_state()


if __name__ == "__main__":
    main()
