"""Plotly figures and the small statistics behind them: pure functions of DataFrames, no Streamlit."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from scipy import stats

Z90 = float(stats.norm.ppf(0.95))


def box(df: pd.DataFrame, x: str, y: str, title: str) -> go.Figure:
    """One box per value of ``x``, points shown."""
    fig = px.box(df, x=x, y=y, points="all", title=title)
    fig.update_layout(xaxis_title=None)
    return fig


def matrix_heatmap(df: pd.DataFrame, rows: str, cols: str, values: str, title: str,
                   zmin: float | None = None, zmax: float | None = None) -> go.Figure:
    """Heatmap of ``values`` over ``rows`` × ``cols`` (long format in, mean where a cell repeats)."""
    grid = df.pivot_table(index=rows, columns=cols, values=values, aggfunc="mean")
    fig = px.imshow(grid, text_auto=".2f", aspect="auto", color_continuous_scale="Viridis", zmin=zmin, zmax=zmax,
                    title=title, labels={"color": values})
    return fig


def histograms(df: pd.DataFrame, value: str, label: str, title: str) -> go.Figure:
    """Overlaid, normalised histograms of ``value``, one colour per ``label``."""
    fig = px.histogram(df, x=value, color=label, barmode="overlay", histnorm="probability", nbins=30, opacity=0.6,
                       title=title)
    return fig


def interval_chart(df: pd.DataFrame, label: str, mean: str, low: str, high: str, point: str | None,
                   facet: str | None, title: str, names: tuple[str, str] = ("BCC", "CC")) -> go.Figure:
    """Means with [low, high] error bars per ``label`` (one panel per ``facet``), the uncorrected ``point`` beside."""
    facets = list(dict.fromkeys(df[facet])) if facet else [None]
    fig = go.Figure()
    for i, f in enumerate(facets):
        part = df if f is None else df[df[facet] == f]
        suffix = f" · {f}" if f is not None else ""
        fig.add_trace(go.Scatter(
            x=part[mean], y=part[label], mode="markers", name=f"{names[0]}{suffix}", marker={"size": 10},
            error_x={"type": "data", "symmetric": False, "array": part[high] - part[mean],
                     "arrayminus": part[mean] - part[low]}, offsetgroup=str(i), legendgroup=str(f)))
        if point and point in part:
            fig.add_trace(go.Scatter(x=part[point], y=part[label], mode="markers", name=f"{names[1]}{suffix}",
                                     marker={"symbol": "x", "size": 9}, legendgroup=str(f)))
    fig.update_layout(title=title, xaxis_title="success rate", yaxis_title=None)
    return fig


def prob_greater_normal(mean: np.ndarray, low: np.ndarray, high: np.ndarray, z: float = Z90) -> np.ndarray:
    """``P[i, j] = P(A_i > A_j)`` treating each estimate as normal with sd = (high − low) / (2z).

    Example:
        >>> prob_greater_normal(np.array([0.6, 0.4]), np.array([0.5, 0.3]), np.array([0.7, 0.5])).round(3)
        array([[0.5 , 0.99],
               [0.01, 0.5 ]])
    """
    mean, low, high = (np.asarray(a, dtype=float) for a in (mean, low, high))
    sd = np.maximum((high - low) / (2 * z), 1e-12)
    diff = mean[:, None] - mean[None, :]
    scale = np.sqrt(sd[:, None] ** 2 + sd[None, :] ** 2)
    return stats.norm.cdf(diff / scale)


def prob_greater_draws(draws: np.ndarray) -> np.ndarray:
    """``P[i, j]`` = share of posterior draws (rows of ``draws``: one per model) where model i beats model j.

    Example:
        >>> prob_greater_draws(np.array([[1, 2, 3], [0, 2, 4]]))
        array([[0.        , 0.33333333],
               [0.33333333, 0.        ]])
    """
    d = np.asarray(draws, dtype=float)
    return (d[:, None, :] > d[None, :, :]).mean(axis=2)


def pairwise_heatmap(p: np.ndarray, labels: list[str], title: str) -> go.Figure:
    """Heatmap of ``P[i, j] = P(A_i > A_j)``; the diagonal (a model against itself) is left blank."""
    p = np.array(p, dtype=float)
    np.fill_diagonal(p, np.nan)
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
    extra = {}
    if error is not None:
        low, high = error
        df = df.assign(_up=df[high] - df[y], _down=df[y] - df[low])
        extra = {"error_y": "_up", "error_y_minus": "_down"}
    fig = px.bar(df, x=x, y=y, color=color, barmode="group", title=title, **extra)
    fig.update_layout(xaxis_title=None)
    return fig
