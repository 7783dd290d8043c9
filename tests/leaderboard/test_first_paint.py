"""What a page sends first: its table. Filters drawn after the table they control (``widgets.controls_then``), and
filters, figures and second tables held until the browser reports the session's first table drawn
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


def _table_script():
    import pandas as pd
    import streamlit as st

    import widgets

    st.session_state["runs"] = st.session_state.get("runs", 0) + 1

    def controls(ui):
        left, right = ui.columns(2)
        return left.selectbox("Letter", ["a", "b"], key="letter"), right.toggle("Flag", key="flag")

    def content(values):
        if st.session_state.get("with_table", True):
            widgets.table(pd.DataFrame({"letter": [values[0]]}))
        else:
            st.info("No runs match these filters.")

    widgets.controls_then(controls, content, key="test")
    widgets.report_first_table()


def _held(at: AppTest) -> list:
    """The blocks holding a place until the first table is drawn (their id ends with the key's suffix)."""
    found, todo = [], list(at.main.children.values())
    while todo:
        node = todo.pop()
        if getattr(getattr(node, "proto", None), "id", "").endswith("_after_first_table"):
            found.append(node)
        todo.extend(getattr(node, "children", {}).values())
    return found


def test_the_widgets_wait_for_the_table_they_control_in_a_place_held_at_their_height():
    at = AppTest.from_function(_table_script).run()
    assert not at.exception
    assert len(at.dataframe) == 1 and not at.selectbox and not at.toggle  # the table alone, first
    held = _held(at)
    assert len(held) == 1 and held[0].proto.height_config.pixel_height == 68  # max(68, 24): one row of columns
    at.session_state["table_on_screen"] = True  # the browser's report
    runs = at.session_state["runs"]
    at.run()
    assert at.selectbox(key="letter").value == "a" and at.toggle(key="flag").value is False
    assert not _held(at) and len(at.dataframe) == 1
    assert at.session_state["runs"] == runs + 1  # the values read before are those drawn: no second run


def test_without_a_table_the_widgets_do_not_wait():
    """Filters that leave no runs: nothing will report a table, and the filters are what the user needs."""
    at = AppTest.from_function(_table_script)
    at.session_state["with_table"] = False
    at.run()
    assert at.selectbox(key="letter").value == "a" and at.info and not _held(at)


def test_widgets_once_drawn_never_wait_again_and_keep_what_the_user_chose():
    """Filters that first left no table (drawn at once), changed until a table comes: they stay, with their
    values (a run that left them out would drop their state, and no report would come in a fragment's run)."""
    at = AppTest.from_function(_table_script)
    at.session_state["with_table"] = False
    at.run()
    at.selectbox(key="letter").set_value("b").run()
    at.session_state["with_table"] = True
    at.toggle(key="flag").set_value(True).run()
    assert len(at.dataframe) == 1 and not _held(at)
    assert at.selectbox(key="letter").value == "b" and at.toggle(key="flag").value is True
    assert at.dataframe[0].value.letter.tolist() == ["b"]


def test_peek_tells_the_controls_height_from_their_layout():
    import widgets

    ui = widgets.Peek()
    left, right = ui.columns([1, 2])
    left.selectbox("Dataset", ["All"])
    right.multiselect("Columns", ["a"])
    right.caption("a line")
    ui.toggle("Flag")
    # a row as tall as its tallest column (68 + 16 + 22.4), the gap, the toggle
    assert ui.height() == pytest.approx(106.4 + 16 + 24)
    assert widgets.Peek().height() == 0


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
    assert not at.selectbox and not at.multiselect  # nor above it: the filters' place is held too
    if second:
        assert f"Drawing {second} once the table above is on screen…" in pending
    # the browser's report (widgets.report_first_table's component sets it)
    at.session_state["table_on_screen"] = True
    at.run()
    assert not _figure_pending(at)
    assert at.selectbox(key=f"f_{family}_sort").value and at.multiselect(key=f"f_{family}_cols").value  # the filters
    assert at.tabs  # the figures' tabs, the open one drawn
    assert len(at.get("plotly_chart")) == 1
    assert f"{load_schema().metrics[load_schema().families[family].main_metric].display}" in \
        " ".join(c.proto.spec for c in at.get("plotly_chart"))
    if second:  # its controls, and its table or the line that says why there is none
        assert at.radio(key="praco_table_convention").value == "paper"
