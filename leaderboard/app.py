"""Countboard leaderboard: ``countboard leaderboard`` (or ``streamlit run leaderboard/app.py -- --db index.duckdb``).

``st.navigation`` over the modules of ``views/`` (one per page, each a ``main()``; not ``pages/``, which Streamlit
would also serve on its own: a page opened by its address ran without this file): the Overview, one page per
schema ``page`` key (families whose ``page`` names it), the runs and the annotation page. Every page reads the
DuckDB index read-only through ``data``; nothing connects at import time. An index that is missing or cannot
be read (``data.board_problem``) is one line in place of the page, until it can be read again. Streamlit puts this file's folder on
``sys.path``, so the pages import the shared modules (``data``, ``widgets``…) by name.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

import data
import widgets
from countboard.escaping import md_code
from countboard.paths import LEADERBOARD_PAGES
from countboard.schema import load_schema

_HERE = Path(__file__).resolve().parent
INDEX_POLL_S = 3.0  # how often a page that cannot read the index looks at it again

# The pages are ``countboard.paths.LEADERBOARD_PAGES`` (module under views/, url path), which the server that
# serves them reads too (``leaderboard_serve``). No icons: Streamlit fetches ":material/…:" icons from
# fonts.gstatic.com, emoji need an emoji font, and the app requests nothing outside its own server.
FIXED_TITLES = {"overview": "Overview", "runs": "Runs", "annotate": "Annotate",
                "numeracy": "Text-to-image numeracy"}


def page_title(page: str) -> str:
    """A family page's title: the display name of its one family (plotting modules stay unimported here)."""
    fams = load_schema().page_families(page)
    return fams[0].display if len(fams) == 1 else page.replace("_", " ").capitalize()


def page_file(module: str) -> str:
    return str(_HERE / "views" / f"{module}.py")


@st.fragment(run_every=INDEX_POLL_S)
def wait_for_index(problem: str) -> None:
    """While the page shows why the index cannot be read: look again every few seconds, and draw the page again
    once that changed (the index rebuilt, its lock released), with no reload."""
    if data.board_problem() != problem:
        st.rerun()


def main() -> None:
    st.set_page_config(page_title="Countboard", layout="wide")
    pages = [st.Page(page_file(module), title=FIXED_TITLES.get(module) or page_title(module),
                     url_path=url or None, default=not url)
             for module, url in LEADERBOARD_PAGES]
    nav = st.navigation(pages)
    st.sidebar.caption(f"Index: {md_code(data.db_path())}")
    problem = data.board_problem()
    if problem:  # no page reads an index it cannot read: one line, until the index is good again
        st.title(nav.title)
        (st.info if not data.index_exists() else st.warning)(problem)
        wait_for_index(problem)
        return
    nav.run()
    widgets.report_first_table()  # outside the pages' fragments: its report reruns the whole page


if __name__ == "__main__":
    main()
