"""The papers' own numbers beside the ranking: the reference rows typed from the seed papers
(``countboard.publish.references``) that match an entry shown, with the paper's value, ours with its interval, the
difference and a flag, by the same matching and flag rule as the published site."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import widgets
from countboard.publish import references
from countboard.schema import Schema

MISSING = "—"
COLUMNS = ["model", "metric", "paper", "ours", "our interval", "difference", "against ours", "source"]


def reference_keys(family: str, schema: Schema, have: set[str]) -> list[str]:
    """The metric keys (and their interval bounds) the references give for ``family`` that the view has: the
    ranking fetches them so that the papers' values can stand beside ours."""
    keys = []
    for key in references.metrics_of(family):
        info = schema.metrics.get(key)
        keys += [key] + ([info.interval.low, info.interval.high] if info and info.interval else [])
    return [k for k in dict.fromkeys(keys) if k in have]


def _num(value, spec: str = ".4g") -> str:
    return MISSING if value is None or pd.isna(value) else format(float(value), spec)


def reference_frame(family: str, rows: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """One row per reference that matches an entry of ``rows`` (the board's ranking), as the board shows it."""
    refs = references.compare_rows(family, rows, schema)
    if refs.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = []
    for r in refs.to_dict("records"):
        words, flagged = references.verdict(r)
        interval = f"[{_num(r['low'])}, {_num(r['high'])}]" if pd.notna(r["low"]) else MISSING
        out.append({"model": str(r["model"]), "metric": r["metric_display"], "paper": r["paper_shown"],
                    "ours": _num(r["ours"]), "our interval": interval, "difference": _num(r["difference"], "+.4g"),
                    "against ours": f"⚠ {words}" if flagged else words, "source": f"{r['paper']}: {r['source']}"})
    return pd.DataFrame(out, columns=COLUMNS)


def draw_paper_values(family: str, rows: pd.DataFrame, schema: Schema, key: str) -> None:
    """The references beside the ranking ``rows``, when some match (nothing drawn otherwise); a second grid, so
    drawn once the session's first table is on screen (``widgets.after_first_table``)."""
    frame = reference_frame(family, rows, schema)
    if frame.empty or not widgets.after_first_table(key, "the papers' numbers"):
        return
    n_out = int(frame["against ours"].str.startswith("⚠").sum())
    st.subheader("The papers' numbers beside ours")
    st.caption(f"Values the papers report for the same model, dataset, split and protocol (typed from the papers, in "
               f"this metric's unit); difference = ours − paper; {n_out} of {len(frame)} flagged (⚠: the paper's "
               "value outside our interval, or a mark such as GeckoNum Table 3's ✓ / = on the other side of our "
               "p-value). The published site shows the same rows.")
    st.dataframe(frame, hide_index=True, key=key)
