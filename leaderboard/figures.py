"""Plotly figures and the small statistics behind them: pure functions of DataFrames, no Streamlit."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from scipy import stats

from countboard.escaping import plotly as esc


def _title(text: str) -> str:
    """A title or axis name drawn as typed (Plotly reads no template in titles: ``%`` stays)."""
    return esc(text, template=False)


def _escaped(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its text cells as Plotly shows them literally (``countboard.escaping.plotly``): every label,
    legend entry and hover a figure takes from the store is drawn as typed, never as Plotly's HTML or LaTeX."""
    text = [c for c in df.columns if df[c].dtype == object or isinstance(df[c].dtype, pd.CategoricalDtype)
            or str(df[c].dtype) in ("string", "str")]
    if not text:
        return df
    return df.assign(**{c: df[c].map(lambda v: esc(v) if isinstance(v, str) else v) for c in text})


def box(df: pd.DataFrame, x: str, y: str, title: str, beside: str | None = None,
        names: tuple[str, str] = ("", "")) -> go.Figure:
    """One box per value of ``x``, points shown; with ``beside``, a second panel of that column next to it
    (its own y axis starting at 0), so that a value that only looks good on one half is seen with the other."""
    df, title, names = _escaped(df), _title(title), (_title(names[0]), _title(names[1]))
    if beside is None or beside not in df:
        fig = px.box(df, x=x, y=y, points="all", title=title)
        fig.update_layout(xaxis_title=None)
        return fig
    fig = make_subplots(rows=1, cols=2, subplot_titles=names, horizontal_spacing=0.12)
    colours = px.colors.qualitative.Plotly
    for col, value in ((1, y), (2, beside)):
        for i, label in enumerate(dict.fromkeys(df[x])):  # one colour per entry in both panels
            part = df[df[x] == label]
            fig.add_trace(go.Box(x=part[x], y=part[value], name=str(label), boxpoints="all", showlegend=False,
                                 legendgroup=str(label), marker_color=colours[i % len(colours)]), row=1, col=col)
        fig.update_yaxes(rangemode="tozero", row=1, col=col)
    fig.update_layout(title=title)
    return fig


def category_order(values) -> list:
    """Axis order of count categories: numbers by value, ``"N+"`` right after ``N``, ranges (``"2-3"``) by their
    lower end after the numbers they start at, anything else (``"range"``, words) last in order of appearance.

    Example:
        >>> category_order(["10", "2", "10+", "range", "0", "2-3"])
        ['0', '2', '2-3', '10', '10+', 'range']
    """
    def key(i_v):
        i, v = i_v
        s = str(v).strip()
        try:
            return (0, float(s), 0, i)
        except ValueError:
            pass
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(\+|[-–]\s*\d+(?:\.\d+)?)", s)
        if m:
            return (0, float(m.group(1)), 1 if m.group(2) != "+" else 2, i)
        return (1, 0.0, 0, i)

    uniq = list(dict.fromkeys(values))
    return [v for _, v in sorted(enumerate(uniq), key=key)]


def matrix_heatmap(df: pd.DataFrame, rows: str, cols: str, values: str, title: str,
                   zmin: float | None = None, zmax: float | None = None) -> go.Figure:
    """Heatmap of ``values`` over ``rows`` × ``cols`` (long format in, mean where a cell repeats).

    Categories are ordered by ``category_order`` and drawn on categorical axes (labels such as ``"10+"`` stay
    labels); the colour scale starts at 0 unless a value is negative (counts and rates are drawn from 0).
    """
    df, title = _escaped(df), _title(title)
    grid = df.pivot_table(index=rows, columns=cols, values=values, aggfunc="mean", observed=True)
    grid = grid.reindex(index=category_order(grid.index), columns=category_order(grid.columns))
    finite = grid.to_numpy(dtype=float)
    lowest = float(np.nanmin(finite)) if np.isfinite(finite).any() else 0.0
    zmin = zmin if zmin is not None else min(0.0, lowest)
    text = [["" if np.isnan(v) else f"{v:.2f}" for v in row] for row in finite]
    fig = go.Figure(go.Heatmap(z=finite, x=[str(c) for c in grid.columns], y=[str(r) for r in grid.index],
                               text=text, texttemplate="%{text}", colorscale="Viridis", zmin=zmin, zmax=zmax,
                               colorbar={"title": {"text": values}}, hoverongaps=False))
    fig.update_xaxes(type="category", title=cols)
    fig.update_yaxes(type="category", title=rows, autorange="reversed")
    fig.update_layout(title=title)
    return fig


def histograms(df: pd.DataFrame, value: str, label: str, title: str) -> go.Figure:
    """Overlaid, normalised histograms of ``value``, one colour per ``label``."""
    df, title = _escaped(df), _title(title)
    fig = px.histogram(df, x=value, color=label, barmode="overlay", histnorm="probability", nbins=30, opacity=0.6,
                       title=title)
    return fig


def interval_chart(df: pd.DataFrame, label: str, mean: str, low: str, high: str, point: str | None,
                   facet: str | None, title: str, names: tuple[str, str] = ("BCC", "CC"),
                   axis: str = "value", hover: str | None = None) -> go.Figure:
    """Means with [low, high] error bars per ``label`` (one panel per ``facet``), the uncorrected ``point`` beside;
    ``hover`` names a column of text shown when the pointer is on an entry (e.g. the units behind its interval)."""
    df, title, names = _escaped(df), _title(title), (_title(names[0]), _title(names[1]))
    facets = list(dict.fromkeys(df[facet])) if facet else [None]
    fig = go.Figure()
    for i, f in enumerate(facets):
        part = df if f is None else df[df[facet] == f]
        suffix = f" · {f}" if f is not None else ""
        fig.add_trace(go.Scatter(
            x=part[mean], y=part[label], mode="markers", name=f"{names[0]}{suffix}", marker={"size": 10},
            error_x={"type": "data", "symmetric": False, "array": part[high] - part[mean],
                     "arrayminus": part[mean] - part[low]}, offsetgroup=str(i), legendgroup=str(f),
            customdata=np.stack([part[low], part[high]], axis=-1),
            hovertext=part[hover] if hover and hover in part else None,
            hovertemplate=("%{y}: %{x:.4g} [%{customdata[0]:.4g}, %{customdata[1]:.4g}]"
                           + ("<br>%{hovertext}" if hover and hover in part else "") + "<extra></extra>")))
        if point and point in part:
            fig.add_trace(go.Scatter(x=part[point], y=part[label], mode="markers", name=f"{names[1]}{suffix}",
                                     marker={"symbol": "x", "size": 9}, legendgroup=str(f)))
    rows = df[label].nunique()
    fig.update_layout(title=title, xaxis_title=_title(axis), yaxis_title=None, height=max(320, 140 + 24 * rows))
    fig.update_yaxes(type="category")
    return fig


def pairwise_heatmap(p: np.ndarray, labels: list[str], title: str) -> go.Figure:
    """Heatmap of ``P[i, j] = P(A_i > A_j)``; the diagonal (a model against itself) is left blank."""
    p = np.array(p, dtype=float)
    np.fill_diagonal(p, np.nan)
    labels, title = [esc(x) for x in labels], _title(title)
    fig = px.imshow(pd.DataFrame(p, index=labels, columns=labels), text_auto=".2f", zmin=0, zmax=1,
                    color_continuous_scale="RdBu", aspect="auto", title=title,
                    labels={"x": "B", "y": "A", "color": "P(A > B)"})
    return fig


def ranks(df: pd.DataFrame, label: str, group: str, value: str, higher_is_better: bool) -> pd.DataFrame:
    """Rank (1 = best, ties share the best rank) of each ``label`` within each ``group`` by ``value``."""
    out = df[[label, group, value]].copy()
    out["rank"] = out.groupby(group)[value].rank(ascending=not higher_is_better, method="min")
    return out


def kendall_between(rank_df: pd.DataFrame, label: str, group: str) -> pd.DataFrame:
    """Kendall's tau between the rankings of every pair of groups (labels ranked in both)."""
    wide = rank_df.pivot_table(index=label, columns=group, values="rank")
    groups = list(wide.columns)
    tau = pd.DataFrame(np.eye(len(groups)), index=groups, columns=groups)
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            both = wide[[a, b]].dropna()
            t = stats.kendalltau(both[a], both[b]).statistic if len(both) > 1 else np.nan
            tau.loc[a, b] = tau.loc[b, a] = t
    return tau


def rank_chart(rank_df: pd.DataFrame, label: str, group: str, title: str) -> go.Figure:
    rank_df, title = _escaped(rank_df), _title(title)
    fig = px.line(rank_df.sort_values(group), x=group, y="rank", color=label, markers=True, title=title)
    fig.update_yaxes(autorange="reversed", dtick=1)
    return fig


def number_confusion(targets: pd.Series, counted: pd.Series) -> pd.DataFrame:
    """Long table ``requested, counted, n`` from per-image JSON lists of requested and counted numbers.

    Each entity of each image is one pair; counts are rounded to the nearest integer.

    Example:
        >>> number_confusion(pd.Series(["[2, 3]", "[2]"]), pd.Series(["[2.2, 4.0]", "[1.0]"])).values.tolist()
        [[2, 1, 1], [2, 2, 1], [3, 4, 1]]
    """
    pairs = [(int(t), int(round(float(c)))) for ts, cs in zip(targets, counted, strict=True)
             if isinstance(ts, str) and isinstance(cs, str)
             for t, c in zip(json.loads(ts), json.loads(cs), strict=False)]
    df = pd.DataFrame(pairs, columns=["requested", "counted"])
    return df.value_counts().rename("n").reset_index().sort_values(["requested", "counted"]).reset_index(drop=True)


def bars(df: pd.DataFrame, x: str, y: str, color: str, title: str,
         error: tuple[str, str] | None = None) -> go.Figure:
    """Grouped bars; ``error`` = (low, high) columns draw an interval on each bar."""
    df, title, extra = _escaped(df), _title(title), {}
    if error is not None:
        low, high = error
        df = df.assign(_up=df[high] - df[y], _down=df[y] - df[low])
        extra = {"error_y": "_up", "error_y_minus": "_down"}
    fig = px.bar(df, x=x, y=y, color=color, barmode="group", title=title, **extra)
    fig.update_layout(xaxis_title=None)
    return fig


def quartile_boxes(bins: pd.DataFrame, title: str) -> go.Figure:
    """One box per (entry, similarity bin) drawn from precomputed quartiles (``q1``, ``median``, ``q3``; no
    whiskers: the notebook hides outliers), entries side by side in each bin."""
    bins, title = _escaped(bins), _title(title)
    fig = go.Figure()
    for entry, part in bins.groupby("entry", sort=False):
        part = part[part["n"] > 0]
        labels = [f"{lo:.2f}–{hi:.2f}" for lo, hi in zip(part["low"], part["high"], strict=True)]
        fig.add_trace(go.Box(name=str(entry), x=labels, q1=part["q1"], median=part["median"], q3=part["q3"],
                             lowerfence=part["q1"], upperfence=part["q3"], boxpoints=False))
    fig.update_layout(title=title, boxmode="group", xaxis_title="max similarity to a class of the image",
                      yaxis_title="error / count of the most similar class")
    return fig


def calibration_chart(df: pd.DataFrame, title: str) -> go.Figure:
    """Observed coverage (``coverage``) against nominal level (``level``) per ``method``, with the diagonal."""
    df, title = _escaped(df), _title(title)
    fig = px.line(df.sort_values("level"), x="level", y="coverage", color="method", markers=True, title=title)
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="nominal", line={"dash": "dot", "color": "grey"}))
    fig.update_layout(xaxis_title="nominal level", yaxis_title="observed coverage", xaxis_range=[0, 1],
                      yaxis_range=[0, 1.02])
    return fig


def error_chart(df: pd.DataFrame, title: str) -> go.Figure:
    """Mean absolute error (``mae``) against the number of labelled units (``n_human``) per ``method``."""
    df, title = _escaped(df), _title(title)
    fig = px.line(df.sort_values("n_human"), x="n_human", y="mae", color="method", markers=True, title=title)
    fig.update_layout(xaxis_title="human-labelled units", yaxis_title="mean absolute error")
    return fig
