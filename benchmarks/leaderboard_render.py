"""Leaderboard render times at scale: every page's first render and one interaction per page, through AppTest.

The store holds every schema family (``--runs`` in all, default ~5,000: 50 models × 5 datasets × evaluators ×
repeats) plus a few runs per family with artifacts (tables, figures, draws) so that every chart and gallery has
something to draw. The index is built once and kept in ``--workdir``.

For each page the script times, in one process as a server would:
1. the first render with Streamlit's caches emptied (a new server's first visitor);
2. an interaction (the widget listed in ``INTERACTIONS``, e.g. "Rank by" another metric), caches warm.
Targets (issue 13): first render ≤ 1.5 s, interaction ≤ 0.5 s. The ratio column is time / target; times are
medians over ``--repeats``, "max first" the slowest first render (the process's very first one, for the first
page, also pays the imports of Streamlit, DuckDB and Plotly).

Usage: ``python benchmarks/leaderboard_render.py [--runs 5000] [--workdir DIR] [--repeats 3] [--quick]``
(``--quick``: 500 runs, one repeat).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from countboard.index import build_index
from countboard.paths import leaderboard_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the generated store is a test fixture
from tests.fixtures.synthetic_store import make_store, specs_from_schema  # noqa: E402

FIRST_TARGET, INTERACTION_TARGET = 1.5, 0.5
DATASETS = tuple(f"data_{i}" for i in range(5))
# page -> (query params, widget kind, widget key, new value or None for the second option)
INTERACTIONS = {
    "views/overview.py": ({}, None, None, None),
    "views/counters.py": ({}, "selectbox", "f_counters_sort", "nmn"),
    "views/numeracy.py": ({"section": "generator_autoeval"}, "selectbox", "f_generator_autoeval_dataset", None),
    "views/acs.py": ({}, "selectbox", "f_acs_sort", "acs_mc_mean"),
    "views/grounding.py": ({}, "selectbox", "f_grounding_sort", "wdp"),
    "views/runs.py": ({}, "text_input", "runs_search", "model_1"),
    "views/annotate.py": ({}, None, None, None),
}


def build(workdir: Path, n_runs: int) -> Path:
    """A store of about ``n_runs`` runs over every family, indexed; reused when already there."""
    db = workdir / f"store_{n_runs}" / "index.duckdb"
    if db.exists():
        return db
    root = db.parent
    specs = specs_from_schema(models_per_family=50, datasets=DATASETS)
    per_repeat = sum(len(s.models) * len(s.datasets) * max(1, len(s.evaluators)) for s in specs)
    repeats = max(1, round(n_runs / per_repeat))
    t0 = time.perf_counter()
    make_store(root, specs, seed=1, repeats=repeats, with_artifacts=False)
    make_store(root, specs_from_schema(models_per_family=3, datasets=DATASETS[:1]), seed=2)
    print(f"store: {repeats * per_repeat} runs without artifacts + a few with, {time.perf_counter() - t0:.0f} s")
    t0 = time.perf_counter()
    build_index(f"sqlite:///{root / 'mlflow.db'}", db)
    print(f"index: {time.perf_counter() - t0:.0f} s")
    return db


def time_page(page: str, repeats: int) -> tuple[float, float, float | None]:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    params, kind, key, value = INTERACTIONS[page]
    firsts, clicks = [], []
    for _ in range(repeats):
        st.cache_data.clear()
        st.cache_resource.clear()
        at = AppTest.from_file(str(leaderboard_dir() / "app.py"), default_timeout=120)
        # the whole page, as a session has it once its browser reported the first table drawn (filters, figures;
        # widgets.after_first_table): AppTest runs no browser
        at.session_state["table_on_screen"] = True
        for k, v in params.items():
            at.query_params[k] = v
        at.switch_page(page)
        t0 = time.perf_counter()
        at.run()
        firsts.append(time.perf_counter() - t0)
        if at.exception:
            raise RuntimeError(f"{page}: {at.exception[0].value}")
        if kind is None:
            continue
        widget = getattr(at, kind)(key=key)
        new = value if value is not None else widget.options[1]
        widget.set_value(new)
        t0 = time.perf_counter()
        at.run()
        clicks.append(time.perf_counter() - t0)
        if at.exception:
            raise RuntimeError(f"{page} after {key}={new}: {at.exception[0].value}")
    return statistics.median(firsts), max(firsts), (statistics.median(clicks) if clicks else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "countboard-render-bench")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="500 runs, one repeat")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.repeats = 500, 1
    logging.disable(logging.WARNING)
    args.workdir.mkdir(parents=True, exist_ok=True)
    db = build(args.workdir, args.runs)
    os.environ["COUNTBOARD_INDEX_DB"] = str(db)
    sys.path.insert(0, str(leaderboard_dir()))
    print(f"{'page':<22}{'first (s)':>10}{'/1.5 s':>8}{'max first':>10}{'interaction (s)':>17}{'/0.5 s':>8}")
    for page in INTERACTIONS:
        first, worst, click = time_page(page, args.repeats)
        click_s = f"{click:17.3f}{click / INTERACTION_TARGET:8.2f}" if click is not None else f"{'—':>17}{'':>8}"
        print(f"{page.removeprefix('views/'):<22}{first:10.3f}{first / FIRST_TARGET:8.2f}{worst:10.3f}{click_s}",
              flush=True)


if __name__ == "__main__":
    main()
