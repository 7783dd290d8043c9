"""The pictures of ``docs/img/``: every leaderboard page and one run in the MLflow UI, in a real browser.

``make screenshots`` (or ``python benchmarks/screenshots.py [--store DIR] [--out DIR]``) indexes a store, serves
``countboard leaderboard`` and ``countboard mlflow-ui`` on free ports of 127.0.0.1 (the board's run links pointing
at that UI), opens each page as a reader does (from the Overview, through its family link or the sidebar) in
Debian's headless Chromium driven by Playwright (1280x800 viewport) and saves ``<out>/<page>.png`` and
``<out>/mlflow_run.png``; then publishes the same index (``countboard publish``) and opens the static site from
``file://``: ``site_overview.png``, ``site_benchmark.png`` (the first counters benchmark page, at its top) and
``site_entry.png`` (the best entry of that page, with its provenance). Each picture is reduced to a 256-colour
palette (under 300 KB, else the script fails).

Without ``--store`` it builds a small store first (every family of the schema, 3 models each, with artifacts: the
store of the leaderboard tests, a few seconds); ``--store mlruns`` after ``make demo`` takes the demo's store.
Needs the Debian package ``chromium`` and ``playwright`` (the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the store generator and the browser driver are test fixtures
from tests.fixtures.browser import MISSING, Watched, browser  # noqa: E402

from countboard.commands.leaderboard import leaderboard_command  # noqa: E402
from countboard.errors import CountboardError  # noqa: E402

MAX_BYTES = 300_000
LINK_WAIT_MS = 30_000  # how long the Overview may take to show a family's link before the page is skipped
VIEWPORT = (1280, 800)
# page -> the link that opens it from the Overview (None: the Overview itself)
PAGES = {"overview": None, "counters": 'a[href*="section=counters"]',
         "numeracy_human": 'a[href*="section=generators"]',
         "numeracy_autoeval": 'a[href*="section=generator_autoeval"]', "acs": 'a[href*="section=acs"]',
         "grounding": 'a[href*="section=grounding"]', "runs": '[data-testid="stSidebarNav"] a[href$="/runs"]',
         "annotate": '[data-testid="stSidebarNav"] a[href$="/annotate"]'}
ASSISTANT_SEEN = ("try { localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');"
                  " localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false') } catch (e) {}")
#: pictures of the published site -> the page (a glob under the site; the first match in name order)
SITE_PAGES = {"site_overview": "index.html", "site_benchmark": "benchmarks/counters__*.html",
              "site_entry": None}
CHARTS = ("counters",)  # pages pictured twice: at the top, and at their first Plotly chart
# drawn: a table's cells (or the Overview's family links, or any text for the Annotate page), no script running and
# no figure still waiting for the first table (``widgets.after_first_table``)
DRAWN = """(name) => {
  if (document.querySelector('[data-testid="stStatusWidget"], [class*="_after_first_table"]')) return false;
  if (document.querySelector('[data-testid="stException"]')) return true;
  if (name === 'overview') return document.querySelectorAll('[data-testid="stPageLink"]').length > 0;
  if (name === 'annotate') return document.body.innerText.length > 200;
  return document.querySelectorAll('[data-testid="stDataFrame"] [role="gridcell"]').length > 0;
}"""


def _port(preferred: int) -> int:
    """``preferred`` (the port the pictures should show) when it is free, else any free port."""
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port on 127.0.0.1")


@contextlib.contextmanager
def _serve(cmd: list[str], health: str, log: Path, env: dict, timeout_s: float = 300.0) -> Iterator[None]:
    """Run ``cmd`` until the block ends, once ``health`` answers 200."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + timeout_s
        while True:
            try:
                if urllib.request.urlopen(health, timeout=5).status == 200:
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"{' '.join(cmd[:4])} did not come up; log:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def optimise(path: Path) -> int:
    """Reduce ``path`` to a 256-colour palette PNG; its size in bytes."""
    from PIL import Image

    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)
    return path.stat().st_size


def _shown_run(uri: str) -> tuple[str, str]:
    """The experiment and run to show in the MLflow UI: a finished counter run with the most metrics."""
    from mlflow.tracking import MlflowClient

    from countboard.tracking.tags import FAMILY, PARTIAL, ROLE, ROLE_SWEEP

    client = MlflowClient(tracking_uri=uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    runs = [r for r in client.search_runs(ids, "attributes.status = 'FINISHED'", max_results=2000)
            if r.data.tags.get(ROLE) != ROLE_SWEEP and r.data.tags.get(PARTIAL) != "true"]
    if not runs:
        raise RuntimeError(f"no finished run in {uri}: run `make demo` or leave out --store")
    best = max(runs, key=lambda r: (r.data.tags.get(FAMILY) == "counters", len(r.data.metrics)))
    return best.info.experiment_id, best.info.run_id


def _board(watched: Watched, base: str, out: Path) -> list[Path]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page, saved = watched.page, []
    for name, link in PAGES.items():
        with watched.shot_on_failure(out / f"{name}-failure.png"):
            page.goto(f"{base}/")
            page.wait_for_function(DRAWN, arg="overview", timeout=120_000)
            if link is not None:
                try:  # the Overview draws its family cards one after the other
                    page.locator(link).first.wait_for(timeout=LINK_WAIT_MS)
                except PlaywrightTimeout:
                    print(f"{name}: no link to it on the Overview (no runs of its family in the store); skipped")
                    continue
                page.locator(link).first.click()
                page.wait_for_timeout(1000)
                page.wait_for_function(DRAWN, arg=name, timeout=120_000)
            page.mouse.move(1, VIEWPORT[1] - 1)  # off the tables: no hover toolbar in the picture
            page.wait_for_timeout(2500)  # the grid fills its cells and Plotly draws after the script has finished
            saved.append(watched.screenshot(out / f"{name}.png"))
            if name in CHARTS:  # the family's chart, below the tables
                chart = page.locator(".js-plotly-plot").first
                chart.wait_for(timeout=60_000)
                chart.scroll_into_view_if_needed()
                page.wait_for_timeout(1000)
                saved.append(watched.screenshot(out / f"{name}_chart.png"))
    return saved


def _site(watched: Watched, db: Path, work: Path, out: Path) -> list[Path]:
    """Publish the index into ``work/site`` and picture its pages from ``file://`` once their charts are drawn
    (the site's script marks ``data-charts-drawn`` on the body)."""
    from countboard.publish import Options, build_site

    site = build_site(db, work / "site", Options()).out
    page, saved = watched.page, []
    bench = None
    for name, pattern in SITE_PAGES.items():
        if pattern is None:  # the entry: the first ranked of the benchmark page pictured
            link = page.locator('table.ranking a[href*="entries/"]').first if bench else None
            if link is None or not link.count():
                print(f"{name}: no entry link on the benchmark page; skipped")
                continue
            target = (bench.parent / link.get_attribute("href")).resolve()
        else:
            target = next(iter(sorted(site.glob(pattern))), None)
            if target is None:
                print(f"{name}: no page {pattern} in the publication; skipped")
                continue
        with watched.shot_on_failure(out / f"{name}-failure.png"):
            page.goto(target.as_uri())
            page.wait_for_function("document.body.getAttribute('data-charts-drawn') !== null", timeout=60_000)
            page.wait_for_timeout(1000)
            saved.append(watched.screenshot(out / f"{name}.png"))
        if name == "site_benchmark":
            bench = target
    return saved


def _mlflow_run(watched: Watched, base: str, experiment_id: str, run_id: str, out: Path) -> Path:
    page = watched.page
    with watched.shot_on_failure(out / "mlflow_run-failure.png"):
        # MLflow 3.x opens its assistant's side panel on a browser's first visit (useLocalStorage keys, version 1):
        # marked as shown already, the run has the page's width
        page.context.add_init_script(ASSISTANT_SEEN)
        page.goto(f"{base}/#/experiments/{experiment_id}/runs/{run_id}")
        page.get_by_text("About this run").first.wait_for(timeout=120_000)
        page.wait_for_timeout(2500)
        return watched.screenshot(out / "mlflow_run.png")


def take(store: Path, out: Path, work: Path) -> list[tuple[Path, int]]:
    """Serve the board and the MLflow UI over ``store``; the pictures saved under ``out`` with their sizes."""
    from countboard.index import build_index
    from countboard.index.ui_address import UI_ENV
    from countboard.tracking.address import INDEX_DB_ENV, parse
    from countboard.tracking.store import open_address

    if MISSING:
        raise RuntimeError(f"screenshots {MISSING}")
    uri = open_address(parse(store), create=False).uri  # a store that does not exist is refused, not made
    db = work / "index.duckdb"
    build_index(uri, db)
    experiment_id, run_id = _shown_run(uri)
    ui_port, board_port = _port(5000), _port(8501)
    ui, board = f"http://127.0.0.1:{ui_port}", f"http://127.0.0.1:{board_port}"
    env = {**os.environ, INDEX_DB_ENV: str(db), UI_ENV: ui}
    board_cmd = leaderboard_command(db, "127.0.0.1", board_port)
    board_cmd[0] = sys.executable
    ui_cmd = [sys.executable, "-m", "countboard.cli", "mlflow-ui", "--store", str(store), "--host", "127.0.0.1",
              "--port", str(ui_port)]
    out.mkdir(parents=True, exist_ok=True)
    with (_serve(ui_cmd, f"{ui}/health", work / "mlflow-ui.log", env),
          _serve(board_cmd, f"{board}/_stcore/health", work / "board.log", env), browser() as b):
        watched = Watched(b, width=VIEWPORT[0], height=VIEWPORT[1])
        saved = _board(watched, board, out)
        if watched.console_errors:
            print(f"warning: the board logged errors in the browser: {watched.console_errors[:3]}", file=sys.stderr)
        saved.append(_mlflow_run(watched, ui, experiment_id, run_id, out))
        saved += _site(watched, db, work, out)
    sizes = [(p, optimise(p)) for p in saved]
    big = [f"{p.name} ({n / 1000:.0f} kB)" for p, n in sizes if n > MAX_BYTES]
    if big:
        raise RuntimeError(f"pictures over {MAX_BYTES // 1000} kB: {', '.join(big)}; reduce the viewport or colours")
    return sizes


def small_store(store: Path) -> Path:
    """Every family of the schema, 3 models each, with artifacts: the leaderboard tests' store."""
    from tests.fixtures.synthetic_store import make_store, specs_from_schema

    specs = specs_from_schema(models_per_family=3, datasets=("fsc147",))
    specs[0].datasets = ["fsc147", "carpk"]
    make_store(store, specs, seed=7)
    return store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, help="a store folder (e.g. mlruns after `make demo`); default: a small "
                                               "store built in a temporary folder")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go (default docs/img)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="countboard-shots-") as tmp:
        work = Path(tmp)
        store = args.store if args.store else small_store(work / "store")
        try:
            sizes = take(store, args.out, work)
        except (RuntimeError, CountboardError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    for path, n in sizes:
        print(f"{path}  {n / 1000:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
