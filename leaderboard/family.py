"""A family page drawn from the schema: the families whose ``page`` is this page (one section each, picked by a
control that follows the ``?section=`` query parameter), each with its filters, ranking and declared figures.

The figures sit in tabs below the ranking, one figure per tab, and only the open tab's figure is computed and sent
(the first, the ranked metric with its interval, unless another tab was picked). What reaches the browser first is
the ranking table: the section sends it before its filters and metric picker (drawn above it), and the first time a
session opens a page what stands below the table is sent once the browser reports the table drawn
(``widgets.after_first_table``), so that Plotly's code never runs before the grid's first draw
(``benchmarks/leaderboard_browser.py``)."""

from __future__ import annotations

import streamlit as st

import conventions
import data
import galleries
import paper_values
import sections
import similarity
import widgets
from countboard.escaping import md
from countboard.schema import load_schema
from countboard.tracking import tags as tg

DRAW = {
    "intervals": sections.draw_intervals,
    "pairwise": sections.draw_pairwise,
    "evaluator_stability": sections.draw_evaluator_stability,
    "prompt_types": sections.draw_prompt_types,
    "confusion": sections.draw_confusion,
    "by_number": sections.draw_by_number,
    "calibration": sections.draw_calibration,
    "drift": sections.draw_drift,
    "negative_heatmap": sections.draw_negative_heatmap,
    "negative_similarity": similarity.draw_negative_similarity,
    "histograms": sections.draw_histograms,
    "pointing": sections.draw_pointing,
    "answers": sections.draw_answers,
    "conventions": conventions.draw_conventions,
    "density_gallery": galleries.draw_density_gallery,
    "overlay_gallery": galleries.draw_overlay_gallery,
    "image_gallery": galleries.draw_image_gallery,
}
SECTION_PARAM = "section"
# The tab of each figure kind (the figure's own heading says what exactly it shows).
TAB = {
    "intervals": "Interval",
    "pairwise": "P(A > B)",
    "evaluator_stability": "Rank stability",
    "prompt_types": "Per prompt type",
    "confusion": "Confusion matrix",
    "by_number": "By number",
    "calibration": "Calibration",
    "drift": "Count drift",
    "negative_heatmap": "Negative labels",
    "negative_similarity": "Semantic similarity",
    "histograms": "Distributions",
    "pointing": "Pointing game",
    "answers": "Answers",
    "conventions": "Conventions",
    "density_gallery": "Density maps",
    "overlay_gallery": "Overlays",
    "image_gallery": "Images",
}


def render_page(page: str, title: str | None = None) -> None:
    """Draw page ``page``: one section per schema family shown there, the chosen one only."""
    fams = load_schema().page_families(page)
    if not fams:
        st.title(title or page)
        st.info(f"No family in countboard/schema/*.yaml has `page: {page}`; declare one to fill this page.")
        return
    if len(fams) == 1:
        family_section(fams[0].key)
        return
    st.title(title or page.replace("_", " ").capitalize())
    keys = [f.key for f in fams]
    wanted = st.query_params.get(SECTION_PARAM)
    if f"{page}_section" not in st.session_state and wanted in keys:
        st.session_state[f"{page}_section"] = wanted

    def picker(ui) -> str:
        return ui.segmented_control("Section", keys, format_func=data.section_label, key=f"{page}_section",
                                    default=keys[0]) or keys[0]

    def section(key: str) -> None:
        st.query_params[SECTION_PARAM] = key
        family_section(key, heading=True)

    # the section's table is sent before the control (drawn above it)
    widgets.controls_then(picker, section, key=f"{page}_section")


@st.fragment
def family_section(family: str, heading: bool = False) -> None:
    """Filters, ranking and the schema's figures of one family; widgets inside rerun only this section."""
    fam = data.family(family)
    (st.header if heading else st.title)(data.family_title(family))
    if fam and fam.description:
        st.caption(fam.description)
    metrics = data.view_metrics(family)
    if not metrics or data.choices(family).empty:
        widgets.empty_state(family)
        return
    prefix = f"f_{family}"

    def controls(ui):
        return widgets.filters(family, prefix, ui), widgets.metric_picker(family, metrics, prefix, ui)

    # the table is sent before the filters and the metric picker (drawn above it): the browser draws it first
    widgets.controls_then(controls, lambda values: ranking_and_figures(fam, family, metrics, prefix, *values),
                          key=f"{prefix}_controls", fragment=True)


def ranking_and_figures(fam, family: str, metrics, prefix: str, filters, picked) -> None:
    """The ranking of ``family``'s entries that pass ``filters`` by the metric ``picked`` (with the columns
    picked), the metrics some entries could not compute, and the family's figures in tabs."""
    sort, shown = picked
    interval = data.interval_of(sort, metrics)
    bounds = [interval.low, interval.high, *([interval.count] if interval.count else [])] if interval else []
    columns = list(dict.fromkeys([m.key for m in shown] + bounds + _figure_keys(fam)))
    have = {m.key for m in metrics}
    columns = [k for k in columns if k in have] + paper_values.reference_keys(family, load_schema(), have)
    df = data.ranking(family, sort, filters, latest_only=True, columns=list(dict.fromkeys(columns)))
    if df.empty:
        st.info("No runs match these filters.")
        return
    df = df.assign(evaluator=df.evaluator.fillna(widgets.MISSING))
    extra = ("evaluator",) if df.evaluator.nunique() > 1 or (df.evaluator != widgets.MISSING).any() else ()
    widgets.show_ranking(df, shown, sort, extra=extra, key=f"{prefix}_ranking", interval=interval)
    paper_values.draw_paper_values(family, df, load_schema(), key=f"{prefix}_paper_values")
    notes = missing_notes(df, data.run_tag(list(df.run_id), tg.MISSING_METRICS))
    if notes:
        st.caption("Not computed (shown as —), with the reason: " + " · ".join(notes))
    ctx = sections.Ctx(family, df, sort, interval, sections.entry_labels(df), prefix)
    draw_figures(ctx, fam.figures if fam else ())


def missing_notes(df, missing: dict[str, str]) -> list[str]:
    """``**model**: key: reason; ...`` for each entry whose run could not compute some metrics (the run's
    ``missing_metrics`` tag: NaN or infinite on the units that succeeded), so that an empty cell says why.

    Example:
        >>> import pandas as pd
        >>> missing_notes(pd.DataFrame({"model": ["a", "b"], "run_id": ["r1", "r2"]}), {"r2": "nmn no image"})
        ['**b**: nmn no image']
    """
    return [f"**{md(model)}**: {md(missing[run])}" for model, run in zip(df.model, df.run_id, strict=True)
            if missing.get(run)]


def figure_tab_key(family: str) -> str:
    """Session-state key of the figure tabs of ``family``'s section (its value: the open tab's label)."""
    return f"f_{family}_figure"


def draw_figures(ctx: sections.Ctx, figs) -> None:
    """The family's figures in tabs, the open one drawn (the others are drawn when their tab is opened); on a
    session's first page, once the browser has drawn the ranking (``widgets.after_first_table``)."""
    shown = []
    for fig in figs:
        if fig.kind not in DRAW:
            st.warning(f"Family `{ctx.family}` lists figure `{fig.kind}`, which the leaderboard does not know "
                       f"(known: {', '.join(DRAW)}); fix `figures:` in countboard/schema/*.yaml.")
        elif fig.kind != "evaluator_stability" or sections.has_evaluators(ctx):
            shown.append(fig)
    if not shown:
        return
    if not widgets.after_first_table(f"{ctx.prefix}_figures", "the figures"):
        return
    labels = list(dict.fromkeys(TAB.get(f.kind, f.kind) for f in shown))
    tabs = dict(zip(labels, st.tabs(labels, on_change="rerun", key=figure_tab_key(ctx.family)), strict=True))
    for fig in shown:
        tab = tabs[TAB.get(fig.kind, fig.kind)]
        if tab.open:
            with tab:
                DRAW[fig.kind](ctx, fig)


def _figure_keys(fam) -> list[str]:
    """Metric keys the figures read from the entries (besides the ranked one)."""
    keys = []
    for fig in fam.figures if fam else ():
        keys += [k for k in [fig.get("beside"), *fig.get("keys", ())] if isinstance(k, str)]
    return [k for k in keys if k in load_schema().metrics]
