"""A family page drawn from the schema: the families whose ``page`` is this page (one section each, picked by a
control that follows the ``?section=`` query parameter), each with its filters, ranking and declared figures."""

from __future__ import annotations

import streamlit as st

import data
import galleries
import sections
import widgets
from countboard.schema import load_schema

DRAW = {
    "intervals": sections.draw_intervals,
    "pairwise": sections.draw_pairwise,
    "evaluator_stability": sections.draw_evaluator_stability,
    "prompt_types": sections.draw_prompt_types,
    "confusion": sections.draw_confusion,
    "drift": sections.draw_drift,
    "negative_heatmap": sections.draw_negative_heatmap,
    "histograms": sections.draw_histograms,
    "pointing": sections.draw_pointing,
    "density_gallery": galleries.draw_density_gallery,
    "overlay_gallery": galleries.draw_overlay_gallery,
    "image_gallery": galleries.draw_image_gallery,
}
SECTION_PARAM = "section"


def render_page(page: str, title: str | None = None) -> None:
    """Draw page ``page``: one section per schema family shown there, the chosen one only."""
    fams = load_schema().page_families(page)
    if not fams:
        st.title(title or page)
        st.info(f"No family in countboard/schema/*.yaml has `page: {page}`; declare one to fill this page.")
        return
    key = fams[0].key
    if len(fams) > 1:
        st.title(title or page.replace("_", " ").capitalize())
        keys = [f.key for f in fams]
        wanted = st.query_params.get(SECTION_PARAM)
        if f"{page}_section" not in st.session_state and wanted in keys:
            st.session_state[f"{page}_section"] = wanted
        key = st.segmented_control("Section", keys, format_func=data.family_title, key=f"{page}_section",
                                   default=keys[0]) or keys[0]
        st.query_params[SECTION_PARAM] = key
    family_section(key, heading=len(fams) > 1)


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
    filters = widgets.filters(family, prefix)
    sort, shown = widgets.metric_picker(family, metrics, prefix)
    interval = data.interval_of(sort, metrics)
    bounds = [interval.low, interval.high, *([interval.count] if interval.count else [])] if interval else []
    columns = list(dict.fromkeys([m.key for m in shown] + bounds + _figure_keys(fam)))
    have = {m.key for m in metrics}
    columns = [k for k in columns if k in have]
    df = data.ranking(family, sort, filters, latest_only=True, columns=columns)
    if df.empty:
        st.info("No runs match these filters.")
        return
    df = df.assign(evaluator=df.evaluator.fillna(widgets.MISSING))
    extra = ("evaluator",) if df.evaluator.nunique() > 1 or (df.evaluator != widgets.MISSING).any() else ()
    widgets.show_ranking(df, shown, sort, extra=extra, key=f"{prefix}_ranking", interval=interval)
    ctx = sections.Ctx(family, df, sort, interval, sections.entry_labels(df), prefix)
    for fig in fam.figures if fam else ():
        draw = DRAW.get(fig.kind)
        if draw is None:
            st.warning(f"Family `{family}` lists figure `{fig.kind}`, which the leaderboard does not know "
                       f"(known: {', '.join(DRAW)}); fix `figures:` in countboard/schema/*.yaml.")
            continue
        draw(ctx, fig)


def _figure_keys(fam) -> list[str]:
    """Metric keys the figures read from the entries (besides the ranked one)."""
    keys = []
    for fig in fam.figures if fam else ():
        keys += [k for k in [fig.get("beside"), *fig.get("keys", ())] if isinstance(k, str)]
    return [k for k in keys if k in load_schema().metrics]
