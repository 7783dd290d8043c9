"""Countboard leaderboard: ``streamlit run leaderboard/app.py -- --db index.duckdb`` (or ``countboard leaderboard``).

One page per family (counters, generators, grounding) plus a run browser; every page reads the DuckDB index
read-only through ``data``. Display names, sort directions and main metrics come from ``countboard.schema``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # the page modules import each other by name
    sys.path.insert(0, str(_HERE))

import streamlit as st  # noqa: E402

import data  # noqa: E402

PAGES = (("counters.py", "counters", ":material/counter_1:"),
         ("generators.py", "generators", ":material/image:"),
         ("grounding.py", "grounding", ":material/center_focus_strong:"))


def main() -> None:
    st.set_page_config(page_title="Countboard", layout="wide")
    pages = [st.Page(str(_HERE / "overview.py"), title="Overview", icon=":material/home:", default=True)]
    pages += [st.Page(str(_HERE / file), title=data.family_title(family), icon=icon, url_path=family)
              for file, family, icon in PAGES]
    pages.append(st.Page(str(_HERE / "runs.py"), title="Runs", icon=":material/list:", url_path="runs"))
    pages.append(st.Page(str(_HERE / "annotate.py"), title="Annotate", icon=":material/edit:", url_path="annotate"))
    nav = st.navigation(pages)
    st.sidebar.caption(f"Index: `{data.db_path()}`")
    nav.run()


if __name__ == "__main__":
    main()
