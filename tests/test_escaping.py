"""One escaping rule per destination (``countboard.escaping``): hostile names come out as typed."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from countboard.escaping import csv_cell, csv_frame, html, latex, md, md_code, plotly

HOSTILE = ["[ds](javascript:alert(2))", "*x*", "<img src=x onerror=alert(1)>", "$\\frac{}$",
           '=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)", "\tx", "\rx", ":red[x]", "a\nb", "# h", "`c`"]


def _commonmark_text(src: str) -> str:
    """What CommonMark renders from ``src``, as text: escapes resolved, no markup formed."""
    import re

    assert not re.search(r"(?<!\\)[\[\]()*_`<>$#:]", src.replace("\\\\", "")), src
    return re.sub(r"\\(.)", r"\1", src)


@pytest.mark.parametrize("name", HOSTILE)
def test_markdown_shows_the_name_as_typed(name):
    assert _commonmark_text(md(name)) == name.replace("\n", " ").replace("\r", " ")


def test_code_span_and_html_and_plotly():
    assert md_code("a``b") == "``` a``b ```"
    assert html('<a href="x">') == "&lt;a href=&quot;x&quot;&gt;"
    assert plotly("<b>%{y}</b> $x$") == "&lt;b&gt;&#37;{y}&lt;/b&gt; &#36;x&#36;"


def test_latex_and_csv():
    assert latex("$\\frac{}$ & 5%") == r"\$\textbackslash{}frac\{\}\$ \& 5\%"
    for name in ('=HYPERLINK("x")', "+1", "-1", "@x", "\tx", "\rx"):
        assert csv_cell(name) == "'" + name
    assert csv_cell("ok") == "ok" and csv_cell(-1.5) == -1.5
    frame = csv_frame(pd.DataFrame({"Method": ["=x", "a"], "mark": ["=", "✓"], "v": [-1.0, 2.0]}), ["Method"])
    assert frame["Method"].tolist() == ["'=x", "a"] and frame["mark"].tolist() == ["=", "✓"]
    assert frame["v"].tolist() == [-1.0, 2.0]


def test_board_exports_neutralise_hostile_names():
    from countboard.index.praco_table import table_csv, table_latex
    from countboard.index.table3 import table3_csv, table3_latex

    t = pd.DataFrame([{"Method": '=HYPERLINK("http://x")', "NMN": 0.5, "PCCN": 90.0, "CntP": 0.7, "CntR": 0.8,
                       "CntF1": 0.75, "MAE": 1.0, "RMSE": 2.0, "Source": "run"}])
    back = pd.read_csv(io.StringIO(table_csv(t)))
    assert back["Method"].iloc[0] == "'=HYPERLINK(\"http://x\")"
    tex = table_latex(t.assign(Method="$\\frac{}$_a"), "c")
    assert r"\$\textbackslash{}frac\{\}\$\_a &" in tex
    marks = pd.DataFrame([{"Generator": "@evil", "CLIP": "=", "Counter": "✓"}])
    assert "'@evil,=," in table3_csv(marks)
    assert r"@evil & = & \checkmark" in table3_latex(marks)


def test_figures_draw_names_literally():
    import sys

    from countboard.paths import leaderboard_dir

    sys.path.insert(0, str(leaderboard_dir()))
    import figures

    df = pd.DataFrame({"label": ["<img src=x onerror=alert(1)>", "$a$"], "v": [1.0, 2.0], "m": ["x", "y"]})
    fig = figures.bars(df, "label", "v", "m", "*t* <b>")
    assert list(fig.data[0].x) == ["&lt;img src=x onerror=alert(1)&gt;"]
    assert fig.layout.title.text == "*t* &lt;b&gt;"
    heat = figures.matrix_heatmap(df.assign(c="%{z}"), "label", "c", "v", "t")
    assert "&#37;{z}" in list(heat.data[0].x) and "&#36;a&#36;" in list(heat.data[0].y)
