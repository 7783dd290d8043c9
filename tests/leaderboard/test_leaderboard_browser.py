"""The leaderboard in a real browser: headless Chromium (1280 px wide) loads every page and section of
``countboard leaderboard``'s ``streamlit run`` on 127.0.0.1.

Debian's Chromium is driven by Playwright (``tests/fixtures/browser.py``). Streamlit renders client-side over a
websocket: the test waits until the page's script has finished and its tables are drawn, then checks the DOM, the
console (no error) and the network (no request, HTTP or websocket, leaves 127.0.0.1), and keeps a screenshot of
each page under ``test-artifacts/leaderboard/`` (``<page>-failure.png`` when a step fails).
Needs the Debian package ``chromium`` and the ``playwright`` package (the ``dev`` extra); skipped with that reason
when either is absent.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from tests.fixtures.browser import MISSING, Watched, board_server, browser

from countboard.schema import load_schema

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "leaderboard"
# Each page is reached as a reader does: from the Overview, through its family link (which names the section) or
# the sidebar. (Loading a deep URL directly makes Streamlit's client probe ``/<page>/_stcore/health`` first, a
# 404 of Streamlit's own that says nothing about the app.)
PAGES = {"overview": None, "counters": 'a[href*="section=counters"]',
         "numeracy_human": 'a[href*="section=generators"]',
         "numeracy_autoeval": 'a[href*="section=generator_autoeval"]', "acs": 'a[href*="section=acs"]',
         "grounding": 'a[href*="section=grounding"]', "runs": '[data-testid="stSidebarNav"] a[href$="/runs"]',
         "annotate": '[data-testid="stSidebarNav"] a[href$="/annotate"]'}
NO_TABLE = ("overview", "annotate")
OTHER_INDEX_ENV = "COUNTBOARD_BROWSER_INDEX"
ROW_PX = 35  # height of a header or body row of Streamlit's data grid
PROBE = """JSON.stringify({
  tables: document.querySelectorAll('[data-testid="stDataFrame"]').length,
  links: document.querySelectorAll('[data-testid="stPageLink"]').length,
  exceptions: document.querySelectorAll('[data-testid="stException"]').length,
  errors: document.querySelectorAll('[data-testid="stAlertContentError"]').length,
  // the script running, or a figure still waiting for the first table (widgets.after_first_table)
  running: !!document.querySelector('[data-testid="stStatusWidget"], [class*="_after_first_table"]'),
  widths: Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).map(t => {
    const s = t.querySelector('.dvn-scroller'); return s ? [s.scrollWidth, s.clientWidth] : null; }),
  cells: Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).slice(0, 1).flatMap(
    t => Array.from(t.querySelectorAll('[role="gridcell"]')).slice(0, 12).map(c => c.innerText)),
  all_cells: Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).map(
    t => Array.from(t.querySelectorAll('[role="gridcell"]')).map(c => c.innerText)),
  text: document.body.innerText})"""

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=f"headless browser test {MISSING}")]


@pytest.fixture(scope="module")
def board_index(filled_index, tmp_path_factory):
    """The filled store (copied) plus one smoke run of a counter with the best CntF1 of all: a partial run, which
    the Counters page hides and the Overview must count apart."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    from countboard.index import build_index

    store, _ = filled_index
    root = tmp_path_factory.mktemp("lb_board")
    src, dst = sqlite3.connect(store.store_dir / "mlflow.db"), sqlite3.connect(root / "mlflow.db")
    with dst:
        src.backup(dst)
    src.close()
    dst.close()
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    tags = {"family": "counters", "model": "counters_model_2", "dataset": "fsc147", "split": "test",
            "task": "counters_task", "model_kind": "counter", "config_hash": "smoke", "partial": "true"}
    run = client.create_run(store.experiment_id, run_name="counters_model_2-smoke", tags=tags)
    client.log_metric(run.info.run_id, "cnt_f1", 0.999)
    client.set_terminated(run.info.run_id, "FINISHED")
    db = root / "index.duckdb"
    build_index(uri, db)
    return store, db


@pytest.fixture(scope="module")
def server(board_index, tmp_path_factory):
    """``streamlit run`` of the app over the filled index and its smoke run (or ``$COUNTBOARD_BROWSER_INDEX``, e.g.
    the 5,000-run index of ``benchmarks/leaderboard_render.py``), bound to loopback."""
    db = Path(os.environ.get(OTHER_INDEX_ENV) or board_index[1])
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    env = {**os.environ, "COUNTBOARD_INDEX_DB": str(db), "COUNTBOARD_MLFLOW_UI": "http://127.0.0.1:5000"}
    with board_server(db, log, env) as base:
        yield base


def _render_all(base: str, shots: Path) -> dict[str, dict]:
    """Open each page in one headless Chromium, wait for it to settle, probe the DOM, take a screenshot (of the page
    as it was, under ``<page>-failure.png``, when a step fails)."""
    results = {}
    with browser() as b:
        watched = Watched(b, width=1280, height=2400)
        page = watched.page
        for name, link in PAGES.items():
            with watched.shot_on_failure(shots / f"{name}-failure.png"):
                page.goto(f"{base}/")
                _settle(page, "overview")
                if link is not None:
                    watched.clear()
                    found = page.evaluate(
                        f"(() => {{ const a = document.querySelector('{link}'); if (a) a.click(); return !!a; }})()")
                    assert found, f"no link {link} on the Overview"
                results[name] = _settle(page, name)
                if name == "runs":  # pick two runs of different families: their metrics side by side
                    _click_rows(page, (0, 4))
                    results[name] = _settle(page, name, tables=3)
                results[name]["console_errors"] = list(watched.console_errors)
                results[name]["requests"] = list(watched.requests)
                watched.screenshot(shots / f"{name}.png")
    return results


def _click_rows(page, rows: tuple[int, ...]) -> None:
    """Tick the selection boxes of ``rows`` of the page's first table (the grid is a canvas: click where they are)."""
    rect = page.locator('[data-testid="stDataFrame"]').first.bounding_box()
    for row in rows:
        page.mouse.click(rect["x"] + 18, rect["y"] + ROW_PX * (row + 1) + ROW_PX / 2)
        page.wait_for_timeout(1500)


def _settle(page, name: str, timeout: float = 90.0, tables: int = 0) -> dict:
    """Probe until the script has finished and the page's main element is drawn (and ``tables`` tables), twice in
    a row."""
    deadline, stable, probe, previous = time.time() + timeout, 0, {}, {}
    page.wait_for_timeout(1000)
    while time.time() < deadline:
        probe = json.loads(page.evaluate(PROBE))
        drawn = probe["links"] if name == "overview" else (probe["text"] if name in NO_TABLE else probe["cells"])
        drawn = drawn and probe["tables"] >= tables
        # settled: drawn, not running, and the same first cells twice (the grid fills its cells lazily)
        same = probe["cells"] == previous.get("cells")
        stable = stable + 1 if drawn and not probe["running"] and same else 0
        previous = probe
        if stable >= 2 or probe["exceptions"]:
            return probe
        page.wait_for_timeout(500)
    return probe


@pytest.fixture(scope="module")
def rendered(server):
    shots = ARTIFACTS / ("large" if os.environ.get(OTHER_INDEX_ENV) else "")
    shots.mkdir(parents=True, exist_ok=True)
    return _render_all(server, shots)


@pytest.mark.parametrize("page", list(PAGES))
def test_page_renders_without_error_box(rendered, page):
    probe = rendered[page]
    assert probe["exceptions"] == 0 and probe["errors"] == 0, probe["text"][:2000]
    shots = ARTIFACTS / ("large" if os.environ.get(OTHER_INDEX_ENV) else "")
    assert (shots / f"{page}.png").stat().st_size > 10_000
    if page == "overview":
        assert probe["links"] >= 1
    elif page not in NO_TABLE:
        assert probe["tables"] >= 1, probe["text"][:2000]


@pytest.mark.parametrize("page", list(PAGES))
def test_page_logs_no_console_error(rendered, page):
    assert rendered[page]["console_errors"] == []


@pytest.mark.parametrize("page", list(PAGES))
def test_page_requests_nothing_outside_loopback(rendered, page):
    outside = [u for u in rendered[page]["requests"]
               if not u.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:"))]
    assert outside == []
    assert rendered[page]["requests"], "the network was not observed"


def test_no_none_printed_in_tables(rendered):
    """Every drawn cell of every table (the Runs page with two runs of different families side by side, whose
    metrics differ: issue 25 saw "None" there): a missing value is "—"."""
    assert rendered["runs"]["tables"] == 3, rendered["runs"]["text"][:2000]
    for page, probe in rendered.items():
        for cells in probe["all_cells"]:
            assert "None" not in cells and "nan" not in cells, (page, cells)
    if not os.environ.get(OTHER_INDEX_ENV):
        assert "—" in rendered["runs"]["all_cells"][2]  # a metric one of the two runs has not


def test_side_by_side_runs_fit_the_page(rendered):
    """Issue 25: the side-by-side tables were half as wide as the page, the runs' value columns out of sight."""
    runs = rendered["runs"]
    for scroll_width, client_width in runs["widths"][1:]:
        assert scroll_width <= client_width + 1, runs["widths"]
    values = [c for c in runs["all_cells"][2] if c not in ("", "—")]
    assert any(c.replace(".", "", 1).replace("-", "", 1).isdigit() for c in values), runs["all_cells"][2][:40]


def test_overview_counts_what_the_pages_rank_and_names_hidden_smoke_runs(rendered):
    """Issue 25: a card said "4 finished runs" for a family whose page ranked none of them (smoke runs are hidden).
    The counters here have 3 complete runs and 1 smoke run: the card counts the 3 entries and names the smoke run."""
    if os.environ.get(OTHER_INDEX_ENV):
        pytest.skip("the smoke run is added to the generated test store only")
    text = rendered["overview"]["text"]
    display = load_schema().families["counters"].display
    assert re.search(re.escape(f"{display}: 3 entries") + r"\s", text), text[:3000]
    assert "Ranked from 3 complete finished runs. 1 smoke (partial) run hidden" in text
    assert f"{display}: 4 finished runs" not in text


@pytest.mark.parametrize("family", ["counters", "grounding"])
def test_ranking_is_shown_best_first(rendered, filled_index, family):
    store, _ = filled_index
    if os.environ.get(OTHER_INDEX_ENV):
        pytest.skip("the expected ranking is known for the generated test store only")
    if family not in load_schema().families:
        pytest.skip(f"family {family!r} is not declared in the schema")
    main = load_schema().families[family].main_metric
    higher = load_schema().metrics[main].higher_is_better is not False
    part = store.values[store.values.family == family].sort_values(["dataset", "split"]).head(1)
    first = store.values[(store.values.family == family) & (store.values.dataset == part.dataset.iloc[0])
                         & (store.values.split == part.split.iloc[0])]
    best = first.sort_values(main, ascending=not higher).model.iloc[0]
    cells = rendered[family]["cells"]
    assert cells[:2] == ["1", best], cells


@pytest.mark.parametrize("page", ["counters", "grounding", "acs", "numeracy_human", "numeracy_autoeval"])
def test_one_ranking_table_at_1280px(rendered, page):
    """Issue 25: the Counters ranking was wider than the page at 1,280 px, its last column cut off; issue 33: the
    fix, a second table of the columns that did not fit, left Numeracy a table holding only "Images". The ranking is
    one table, rank and model first (pinned), its other columns scrolling sideways inside the page's width."""
    probe = rendered[page]
    assert "more column" not in probe["text"]
    cells = probe["all_cells"][0]
    assert cells[0].split("–")[0].strip().isdigit() and cells[1], cells[:4]  # rank, then the model
    scroll_width, client_width = probe["widths"][0]
    assert client_width <= 1280 and scroll_width >= client_width, probe["widths"][0]


@pytest.mark.parametrize("page", ["counters", "grounding"])
def test_counters_and_grounding_rank_with_intervals(rendered, page):
    """Issue 25: the counting and grounding metrics had no interval ("no interval in the schema")."""
    if os.environ.get(OTHER_INDEX_ENV):
        pytest.skip("the generated store logs every declared bound")
    text = rendered[page]["text"]
    assert "no interval in the schema" not in text
    assert "with its 90% interval" in text and "P(A > B)" in text  # the chart, and the tab of the pairwise one


# Records, in the page, what came in which order: the first table's grid, the filters above it, the first Plotly
# chart; and where the grid's top was when it came.
ORDER = """(() => {
  window.__order = [];
  const parts = [['table', '[data-testid="stDataFrame"] canvas'], ['chart', '[data-testid="stPlotlyChart"] .main-svg'],
                 ['filters', '[data-testid="stMain"] [data-testid="stSelectbox"]']];
  new MutationObserver(() => {
    for (const [name, css] of parts)
      if (!window.__order.includes(name) && document.querySelector(css)) {
        window.__order.push(name);
        if (name === 'table') window.__tableTop = tableTop();
      }
  }).observe(document, {subtree: true, childList: true});
  window.tableTop = () => document.querySelector('[data-testid="stDataFrame"]').getBoundingClientRect().top
    + window.scrollY;
})()"""


def test_a_page_opened_by_its_address_draws_its_table_before_any_chart(server):
    """A bookmark or a reload of ``/counters``: the app's own script runs (its sidebar line, its title), the client
    finds the server without asking ``/counters/_stcore/health`` first, and the ranking is drawn before the filters
    above it (into the place held for them, the table stays where it is) and before the chart."""
    with browser() as b:
        watched = Watched(b, width=1280, height=1600)
        page = watched.page
        page.add_init_script(ORDER)
        with watched.shot_on_failure(ARTIFACTS / "counters-by-address-failure.png"):
            page.goto(f"{server}/counters")
            probe = _settle(page, "counters")
            page.wait_for_function("window.__order.length === 3", timeout=60_000)
            order = page.evaluate("window.__order")
            assert order[0] == "table" and set(order) == {"table", "filters", "chart"}, order
            # the filters came into the place held for them: the table did not move
            assert abs(page.evaluate("tableTop()") - page.evaluate("window.__tableTop")) <= 2
            assert probe["exceptions"] == 0 and "Prompt-aware counters" in probe["text"]
            assert "Index:" in page.inner_text('[data-testid="stSidebar"]')  # app.py ran, not the page alone
            assert "Countboard" in page.title()
            assert not [u for u in watched.requests if "/counters/_stcore/" in u], watched.requests
            assert watched.console_errors == []
