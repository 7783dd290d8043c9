"""Names from the store shown as typed on every page and neutralised in every export: a store whose dataset is a
markdown link to ``javascript:``, whose models are an HTML tag, emphasis, TeX math and a spreadsheet formula.

Every markdown source the pages send (titles, captions, boxes, labels) is rendered with CommonMark (markdown-it,
HTML allowed, as a browser's renderer would be given it): no link, image, emphasis or HTML tag may come from a
name, and outside code spans no name may stand unescaped (Streamlit reads ``$…$`` as math). The tables show the
names as typed. The CSV exports (the paper tables' downloads, the publication's data files) give every
formula-looking cell a leading ``'``; the LaTeX exports escape the names.
"""

from __future__ import annotations

import csv
import io
import re

import pandas as pd
import pytest
from markdown_it import MarkdownIt
from tests.fixtures.board import app_test
from tests.fixtures.synthetic_store import make_store, specs_from_schema

from countboard.escaping import FORMULA_STARTS, latex, md
from countboard.index import build_index
from countboard.schema import load_schema

DATASET = "[ds](javascript:alert(2))"
MODELS = ["<img src=x onerror=alert(1)>", "*bold*", "$x$", "=cmd|' /C calc'!A0"]
NAMES = [DATASET, *MODELS]
PAGES = ("views/overview.py", "views/runs.py", "views/annotate.py")
MARKDOWN = ("markdown", "caption", "info", "warning", "error", "success", "title", "header", "subheader")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
RENDER = MarkdownIt("commonmark")


@pytest.fixture(scope="module")
def hostile_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("lb_hostile")
    specs = specs_from_schema(models_per_family=len(MODELS), datasets=(DATASET,))
    for spec in specs:
        spec.models = list(MODELS)
        if spec.family == "counters":  # the Counters page's paper tables read classic runs
            spec.task = "classic"
    store = make_store(root, specs, seed=11)
    db = root / "index.duckdb"
    build_index(store.uri, db)
    return store, db


def _markdown_sources(at) -> list[str]:
    """Every text of the page that Streamlit renders as markdown: elements, and widget and link labels."""
    out = [el.value for kind in MARKDOWN for el in getattr(at, kind)]
    out += [el.proto.label for el in at.get("page_link")]
    out += [w.label for kind in ("selectbox", "radio", "text_input", "toggle", "multiselect", "button")
            for w in getattr(at, kind)]
    out += [o for w in at.radio for o in w.options]  # a radio's options are markdown too
    out += [t.label for t in at.tabs] + [e.label for e in at.expander]
    return [s for s in out if s]


def _assert_as_typed(source: str) -> None:
    """``source`` renders no link, image, emphasis or HTML from a name, and holds no name unescaped outside code."""
    html = RENDER.render(source)
    outside_code = CODE_SPAN.sub("", source)
    for name in NAMES:
        assert name not in outside_code, f"{name!r} unescaped in {source!r}"
    assert "javascript:" not in "".join(re.findall(r'href="([^"]*)"', html)), html
    assert "<img" not in html and "<em>bold" not in html and "<a href=\"javascript" not in html, html


def _pages() -> list[tuple[str, str | None]]:
    sections = [(f"views/{f.page}.py", f.key) for f in load_schema().families.values() if f.page]
    return sections + [(p, None) for p in PAGES]


@pytest.mark.parametrize(("page", "section"), _pages())
def test_every_page_shows_hostile_names_as_typed(monkeypatch, hostile_index, page, section):
    store, db = hostile_index
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(db))
    monkeypatch.setenv("COUNTBOARD_MLFLOW_UI", "http://127.0.0.1:9")
    at = app_test(page, section=section, timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    sources = _markdown_sources(at)
    for source in sources:
        _assert_as_typed(source)
    shown = {str(v) for df in at.dataframe for v in df.value.astype(str).to_numpy().ravel()}
    if page == "views/overview.py":  # the best entry's line names a model and the dataset, escaped
        joined = " ".join(sources)
        assert md(DATASET) in joined and any(md(m) in joined for m in MODELS), joined
    elif page == "views/runs.py":  # the runs' table: every name as typed
        assert set(MODELS) <= shown and DATASET in shown, shown
    elif section is not None and at.dataframe:  # a family's ranking: its models as typed
        assert set(MODELS) & shown, (section, shown)


def _cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text)) for c in row]


def _assert_neutral(text: str) -> None:
    for cell in _cells(text):
        assert len(cell) <= 1 or not cell.startswith(FORMULA_STARTS), cell  # a one-character mark is no formula


def test_paper_table_exports_neutralise_the_names(hostile_index):
    """The Counters page's downloads: the PrACo table and the classic scores table, as CSV and LaTeX."""
    from countboard.index import queries
    from countboard.index.praco_table import praco_caption, praco_table, table_csv, table_latex
    from countboard.index.reader import connect_readonly
    from countboard.index.scores_table import scores_caption, scores_table

    _, db = hostile_index
    con = connect_readonly(db)
    try:
        rows = con.execute(queries.family_rows("counters")).df()
    finally:
        con.close()
    assert set(MODELS) <= set(rows.model)
    rows = pd.concat([rows, rows.assign(task="praco_negative"), rows.assign(task="classic")])
    praco = praco_table(rows, "paper", DATASET, "test", {})
    scores, columns = scores_table(rows.assign(task="classic"), DATASET, "test")
    for table, text, tex in ((praco, table_csv(praco), table_latex(praco, praco_caption("paper", "test", DATASET))),
                             (scores, table_csv(scores, columns),
                              table_latex(scores, scores_caption(DATASET, "test"), "tab:x", columns))):
        assert set(table.Method) == set(MODELS)
        _assert_neutral(text)
        assert "'=cmd|' /C calc'!A0" in _cells(text) and "*bold*" in _cells(text)
        for name in NAMES:
            if any(c in name for c in "\\&%$#_{}~^"):
                assert name not in tex, name
        assert latex("$x$") in tex and latex(DATASET) in tex


def test_publication_csv_neutralises_the_names(hostile_index, tmp_path):
    from countboard.publish import Options, build_site

    _, db = hostile_index
    out = tmp_path / "site"
    build_site(db, out, Options(title="Lab board"))
    files = sorted((out / "data").glob("*.csv"))
    assert files
    seen = set()
    for path in files:
        text = path.read_text()
        _assert_neutral(text)
        seen |= set(_cells(text))
    assert "'=cmd|' /C calc'!A0" in seen and "<img src=x onerror=alert(1)>" in seen
    html = "".join(p.read_text() for p in out.rglob("*.html"))
    assert "<img src=x onerror=alert(1)>" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
