"""What a page sends first: its table. Filters drawn after the table they control (``widgets.controls_then``), and
figures and second tables held until the browser reports the session's first table drawn
(``widgets.after_first_table``)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest
from tests.fixtures.board import app_test

from countboard.schema import load_schema


def _controls_script():
    import streamlit as st

    import widgets

    opts = st.session_state.setdefault("opts", ["x", "y", "z"])
    st.session_state["runs"] = st.session_state.get("runs", 0) + 1

    def controls(ui):
        letter = ui.selectbox("Letter", ["a", "b", "c"], index=1, key="letter")
        cols = ui.multiselect("Columns", opts, default=["x"], key="cols")
        flag = ui.toggle("Flag", value=False, key="flag")
        text = ui.text_input("Search", key="search")
        part = ui.segmented_control("Part", ["p", "q"], default="q", key="part")
        return letter, tuple(cols), flag, text, part

    widgets.controls_then(controls, lambda values: st.markdown(f"content {values}"), key="test")


def _content(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("content"))


def test_the_content_is_drawn_with_what_the_widgets_show():
    at = AppTest.from_function(_controls_script).run()
    assert not at.exception
    assert _content(at) == "content ('b', ('x',), False, '', 'q')"  # every default, read before the widgets exist
    at.selectbox(key="letter").set_value("c").run()
    at.multiselect(key="cols").set_value(["x", "z"]).run()
    at.toggle(key="flag").set_value(True).run()
    at.text_input(key="search").set_value("model_1").run()
    assert _content(at) == "content ('c', ('x', 'z'), True, 'model_1', 'q')"
    runs = at.session_state["runs"]
    at.run()
    assert at.session_state["runs"] == runs + 1  # the same values: one run
    # an option gone (the index rebuilt): the drawn widget falls back, and the content is drawn again with it
    at.session_state["opts"] = ["x", "y"]
    at.run()
    assert at.multiselect(key="cols").value == ["x"]
    assert _content(at) == "content ('c', ('x',), True, 'model_1', 'q')"


def _misread_script():
    import streamlit as st

    import widgets

    st.session_state["runs"] = st.session_state.get("runs", 0) + 1

    def controls(ui):  # a widget whose drawn value Peek cannot know (no key): drawn once more, never in a loop
        return ui.text_input("Search", value="x") if ui is st else ""

    widgets.controls_then(controls, lambda values: st.markdown(f"content {values!r}"), key="test")


def test_a_widget_peek_misreads_reruns_the_section_once_not_forever():
    at = AppTest.from_function(_misread_script).run()
    assert not at.exception
    assert at.session_state["runs"] == 2
    at.run()
    assert at.session_state["runs"] == 4


def test_the_widgets_stand_above_the_content_they_control():
    at = AppTest.from_function(_controls_script).run()
    order = [type(e).__name__ for e in at.main]
    assert order.index("Selectbox") < order.index("Markdown")


def _figure_pending(at: AppTest) -> list[str]:
    return [c.value for c in at.caption if "once the table above is on screen" in c.value]


@pytest.mark.parametrize(("page", "family", "second"), [("views/counters.py", "counters", "the paper's table"),
                                                        ("views/acs.py", "acs", None)])
def test_figures_wait_for_the_first_table(monkeypatch, filled_index, page, family, second):
    _, db = filled_index
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(db))
    at = app_test(page, table_drawn=False).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.dataframe) == 1  # the ranking, sent first
    assert not at.get("plotly_chart")
    pending = _figure_pending(at)
    assert "Drawing the figures once the table above is on screen…" in pending
    assert not at.tabs and not at.number_input  # nothing below the table but the places held
    if second:
        assert f"Drawing {second} once the table above is on screen…" in pending
    # the browser's report (widgets.report_first_table's component sets it)
    at.session_state["table_on_screen"] = True
    at.run()
    assert not _figure_pending(at)
    assert at.tabs  # the figures' tabs, the open one drawn
    assert len(at.get("plotly_chart")) == 1
    assert f"{load_schema().metrics[load_schema().families[family].main_metric].display}" in \
        " ".join(c.proto.spec for c in at.get("plotly_chart"))
    if second:  # its controls, and its table or the line that says why there is none
        assert at.radio(key="praco_table_convention").value == "paper"
