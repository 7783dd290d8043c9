"""The counters' "Conventions" tab: one benchmark's models asked in words scored from the same answers under every
published convention (the ``conv_*`` metrics the schema's ``conventions`` figure lists), each model's spread across
them, and whether the ranking changes (Kendall's tau between the conventions' rankings).

The frames are pure functions of the ranked entries (tested without Streamlit); ``draw_conventions`` draws them.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import plotly.express as px
import streamlit as st

import data
import figures
from countboard.schema import FigureInfo


def long_frame(df: pd.DataFrame, keys: list[str], labels: dict[str, str], names: dict[str, str]) -> pd.DataFrame:
    """``label, convention, accuracy``: one row per entry and convention it reports (entries without any left out).

    Example:
        >>> df = pd.DataFrame({"run_id": ["r1", "r2"], "conv_a": [50.0, 80.0], "conv_b": [60.0, None]})
        >>> long_frame(df, ["conv_a", "conv_b"], {"r1": "m1", "r2": "m2"}, {"conv_a": "A", "conv_b": "B"}
        ...            ).values.tolist()
        [['m1', 'A', 50.0], ['m1', 'B', 60.0], ['m2', 'A', 80.0]]
    """
    rows = [{"label": labels.get(row["run_id"], row["run_id"]), "convention": names.get(k, k), "accuracy": row[k]}
            for row in df.to_dict("records") for k in keys if k in row and pd.notna(row[k])]
    return pd.DataFrame(rows, columns=["label", "convention", "accuracy"])


def spread_table(long: pd.DataFrame) -> pd.DataFrame:
    """Per entry: its accuracy under each convention, the spread (highest minus lowest) and the conventions that
    give the lowest and the highest, widest spread first.

    Example:
        >>> long = pd.DataFrame({"label": ["m", "m", "n", "n"], "convention": ["A", "B", "A", "B"],
        ...                      "accuracy": [40.0, 70.0, 55.0, 50.0]})
        >>> spread_table(long)[["Model", "Spread", "Lowest", "Highest"]].values.tolist()
        [['m', 30.0, 'A', 'B'], ['n', 5.0, 'B', 'A']]
    """
    if long.empty:
        return pd.DataFrame(columns=["Model", "Spread", "Lowest", "Highest"])
    wide = long.pivot_table(index="label", columns="convention", values="accuracy", sort=False)
    wide = wide[list(dict.fromkeys(long.convention))]
    out = wide.copy()
    out["Spread"] = wide.max(axis=1) - wide.min(axis=1)
    out["Lowest"], out["Highest"] = wide.idxmin(axis=1), wide.idxmax(axis=1)
    out = out.reset_index().rename(columns={"label": "Model"}).sort_values("Spread", ascending=False, kind="stable")
    # the spread first: a wide table scrolls sideways, the conventions' values after it
    return out[["Model", "Spread", "Lowest", "Highest", *wide.columns]].reset_index(drop=True)


def swapped_pairs(long: pd.DataFrame) -> pd.DataFrame:
    """Pairs of entries whose order differs between two conventions: ``a, b, better under, worse under``.

    Example:
        >>> long = pd.DataFrame({"label": ["m", "m", "n", "n"], "convention": ["A", "B", "A", "B"],
        ...                      "accuracy": [40.0, 70.0, 55.0, 50.0]})
        >>> swapped_pairs(long).values.tolist()
        [['m', 'n', 'B', 'A']]
    """
    wide = long.pivot_table(index="label", columns="convention", values="accuracy", sort=False)
    rows = []
    for a, b in itertools.combinations(wide.index, 2):
        diff = (wide.loc[a] - wide.loc[b]).dropna()
        ahead, behind = diff[diff > 0], diff[diff < 0]
        if len(ahead) and len(behind):  # a beats b under one convention and loses under another
            rows.append({"a": a, "b": b, "a better under": ", ".join(ahead.index),
                         "b better under": ", ".join(behind.index)})
    return pd.DataFrame(rows, columns=["a", "b", "a better under", "b better under"])


def tau_matrix(long: pd.DataFrame) -> pd.DataFrame:
    """Kendall's tau (scipy) between every two conventions' rankings of the entries (``figures.kendall_between``).

    Example:
        >>> long = pd.DataFrame({"label": list("xyzxyz"), "convention": list("AAABBB"),
        ...                      "accuracy": [1.0, 2.0, 3.0, 3.0, 2.0, 1.0]})
        >>> tau_matrix(long).loc["A", "B"]
        np.float64(-1.0)
    """
    ranks = figures.ranks(long, "label", "convention", "accuracy", higher_is_better=True)
    tau = figures.kendall_between(ranks, "label", "convention")
    order = list(dict.fromkeys(long.convention))
    return tau.loc[order, order]


def draw_conventions(ctx, fig: FigureInfo) -> None:
    """The conventions of one benchmark (dataset · split): each model's spread and the rankings' agreement."""
    st.subheader("Scoring conventions: the same answers under each harness's rule")
    keys = [k for k in fig.get("keys", ()) if k in ctx.df]
    group = ctx.one_group("conventions")
    group = group[group[keys].notna().any(axis=1)] if keys else group.iloc[:0]
    if group.empty:
        st.info("No entry here reports the scoring conventions: they come from `task=classic` runs of a model "
                "asked in words (model=vlm and its presets), which log their accuracy under each convention "
                "(conv_* metrics, docs/counters.md).")
        return
    names = {k: data.metric_display(k).removesuffix(" (%)") for k in keys}
    long = long_frame(group, keys, ctx.labels, names)
    spread = spread_table(long)
    st.caption("Accuracy (%) of each model's raw answers, stored once, under each convention: lmms-eval's and "
               "VLMEvalKit's rules as their code defines them, and ours (docs/counters.md quotes each rule).")
    st.plotly_chart(spread_chart(long), key=f"{ctx.prefix}_conventions")
    st.dataframe(spread.round(2), hide_index=True, key=f"{ctx.prefix}_conventions_spread",
                 column_config={"Model": st.column_config.TextColumn("Model", pinned=True)})
    if long.label.nunique() < 2:
        st.caption("One model here: its spread only; rankings need two models.")
        return
    tau = tau_matrix(long)
    swaps = swapped_pairs(long)
    off = tau.where(~np.eye(len(tau), dtype=bool)).stack()
    if swaps.empty:
        st.success("The ranking is the same under every convention.")
    else:
        st.warning(f"The ranking changes with the convention: {len(swaps)} pair(s) of models swap places "
                   f"(lowest Kendall's τ between two conventions: {off.min():.2f}).")
    st.markdown("Kendall's τ between the conventions' rankings")
    st.dataframe(tau.round(3), key=f"{ctx.prefix}_conventions_tau")
    if not swaps.empty:
        st.markdown("Pairs of models whose order depends on the convention")
        st.dataframe(swaps, hide_index=True, key=f"{ctx.prefix}_conventions_swaps")


def spread_chart(long: pd.DataFrame):
    """Each model's accuracy under each convention on one axis: a wide row of dots is a large spread."""
    fig = px.scatter(long, x="accuracy", y="label", color="convention", symbol="convention",
                     title="Accuracy of the same answers under each convention",
                     labels={"accuracy": "Accuracy (%)", "label": "", "convention": "Convention"})
    fig.update_traces(marker_size=11)
    fig.update_xaxes(range=[-2, 102])
    return fig
