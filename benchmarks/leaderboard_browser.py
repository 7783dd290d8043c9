"""Leaderboard render times in a real browser (headless Chromium), as ratios to a minimal Streamlit page served and
opened the same way in the same run.

The store is made by ``tests/fixtures/bulk_store.py`` (``--runs``, default 30,000, × ``--metrics``, default 100,
over 5 ranking families plus the engine's metrics, 200 models, 10 datasets, 3 splits, 3 seeds, with the galleries'
artifacts for the first models) and indexed once; both are kept in ``--workdir``. Two servers are started as
``countboard leaderboard`` starts its own (``streamlit run`` with the same settings): the leaderboard, and a
minimal page with one table and one Plotly chart (``MINIMAL``). For each page, Chromium (1,280 px, a fresh
profile) navigates to its URL and a script that runs before the page's own records, in the page's clock (0 =
navigation start):

- **first**: when the first chart (a drawn Plotly SVG) or table (a data grid or table) is in the DOM, or, on a
  page with neither (the Overview: its family links), the page's first link or alert;
- **idle**: the last DOM change before the page stays unchanged for ``QUIET_S`` with Streamlit's running
  indicator gone and no element still drawn as a skeleton (its component code not yet loaded).

The interaction is a change of a select box's value through real mouse events (Counters: "Rank by"; the minimal
page: its chart's column), timed from the click on the option to idle, once the page's text has changed (the
ranking's caption, the chart's axis: the rerun has drawn). Every figure is the median of
``--repeats`` (≥ 3) rounds; each round opens the minimal page and then every page, so that the ratios compare
timings taken under the same load. The fresh server's first page (the Overview, opened right after the server
answers its health check: Streamlit, DuckDB, Plotly and the app's modules are imported then) is reported apart,
with its excess over the warm Overview. ``--apptest`` adds the server-side script time of each page
(``leaderboard_render.time_page``) as a second column.

Targets (issue 25), as ratios to the minimal page: first chart ≤ 1.2×, idle ≤ 1.5×, interaction ≤ 0.5 s beyond
the minimal page's own rerun.

``--profile`` then visits each page once more under Chromium's tracing (so that the timed rounds are not slowed by
it) and prints, per page: the websocket messages from the server (count, kB, the largest, when the last came),
the renderer main thread's busy time and its layout time, JavaScript self time by Streamlit bundle
(``PlotlyChart``: Plotly; ``DataFrame``: the grid; ``index``: Streamlit and React), and the DOM nodes, Plotly
charts, traces and points drawn. ``--repeats 0 --profile`` prints the profile alone.

Usage: ``python benchmarks/leaderboard_browser.py [--runs 30000] [--metrics 100] [--workdir DIR] [--repeats 3]
[--apptest] [--store DIR [--db FILE]] [--profile]`` (``--store``/``--db``: an existing store and its index, reused
as they are; an index of another schema version is rebuilt).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the store generator and the browser driver are test fixtures
from tests.fixtures.chromium import Chromium  # noqa: E402

from countboard.commands.leaderboard import STREAMLIT_SETTINGS, leaderboard_command  # noqa: E402
from countboard.index import ddl  # noqa: E402

QUIET_S = 1.0
FIRST_TARGET, IDLE_TARGET, INTERACTION_BEYOND_S = 1.2, 1.5, 0.5
# page -> url path (and query)
PAGES = {"overview": "", "counters": "counters", "numeracy": "numeracy", "acs": "acs", "grounding": "grounding",
         "runs": "runs", "annotate": "annotate"}
APPTEST_PAGES = {"overview": "views/overview.py", "counters": "views/counters.py", "numeracy": "views/numeracy.py",
                 "acs": "views/acs.py", "grounding": "views/grounding.py", "runs": "views/runs.py",
                 "annotate": "views/annotate.py"}
INTERACTION = ("counters", "f_counters_sort")  # page, widget key of the select box
MINIMAL_KEY = "minimal_metric"
MINIMAL = f'''"""One table and one Plotly chart: the floor a Streamlit page stands on."""
import numpy as np
import pandas as pd
import plotly.express as px
import streamlit as st

st.set_page_config(page_title="minimal", layout="wide")
rng = np.random.default_rng(0)
df = pd.DataFrame({{"model": [f"model_{{i:03d}}" for i in range(40)], "cnt_f1": rng.random(40),
                    "mae": rng.random(40) * 10}})
metric = st.selectbox("Metric", ["cnt_f1", "mae"], key="{MINIMAL_KEY}")
st.dataframe(df.sort_values(metric), hide_index=True)
st.plotly_chart(px.bar(df.sort_values(metric), x="model", y=metric))
'''
# Runs before any script of the page: records when the first chart/table is drawn and when the DOM last changed.
PROBE = """(() => {
  const S = window.__cb = {first: null, last: 0, running: false};
  const FIRST = '[data-testid="stPlotlyChart"] .main-svg, [data-testid="stDataFrame"] canvas, '
    + '[data-testid="stDataFrameResizable"], [data-testid="stTable"] table';
  const FALLBACK = '[data-testid="stPageLink"], [data-testid="stAlert"]';
  const tick = () => {
    const now = performance.now();
    S.last = now;
    // the script running, or elements whose component code has not loaded yet (drawn as skeletons)
    // (or a figure's place held until the page's first table is drawn, or a chart whose Plotly code is still
    // loading: the figure is on its way)
    S.running = !!document.querySelector('[data-testid="stStatusWidgetRunningIcon"], '
      + '[data-testid="stStatusWidgetRunningManIcon"], [data-testid="stSkeleton"], [data-testid="stAppSkeleton"], '
      + '[class*="_after_first_table"]')
      || Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"]')).some(e => !e.querySelector('.main-svg'));
    if (S.first === null && document.querySelector(FIRST)) S.first = now;
    if (S.fallback === undefined && document.querySelector(FALLBACK)) S.fallback = now;
  };
  new MutationObserver(tick).observe(document, {subtree: true, childList: true, attributes: true,
                                                characterData: true});
})()"""
# ``changed``: the main area's text (SVG text included) differs from what it was before an interaction's click
STATE = """JSON.stringify({...window.__cb, now: performance.now(), changed: window.__cbBefore === undefined
  || (document.querySelector('[data-testid="stMain"]') || document.body).textContent !== window.__cbBefore})"""
BEFORE = """window.__cbBefore = (document.querySelector('[data-testid="stMain"]') || document.body).textContent"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(workdir: Path, runs: int, metrics: int, store: Path | None = None,
          db: Path | None = None) -> tuple[Path, Path]:
    """The store and its index: ``store`` and ``db`` when given (an index of another schema version is rebuilt),
    else generated under ``workdir`` (made once, then reused)."""
    from tests.fixtures.bulk_store import make_bulk_store

    from countboard.index import build_index

    store = store or workdir / f"store_{runs}x{metrics}"
    db = db or store / "index.duckdb"
    if not (store / "mlflow.db").exists():
        t0 = time.perf_counter()
        make_bulk_store(store, runs, metrics, progress=True)
        print(f"store: {runs} runs x {metrics} metrics in {time.perf_counter() - t0:.0f} s", flush=True)
    found = index_version(db)
    if found != str(ddl.SCHEMA_VERSION):
        if found is not None:
            print(f"index {db} has schema version {found}, not {ddl.SCHEMA_VERSION}: rebuilding it", flush=True)
        stats = build_index(f"sqlite:///{store / 'mlflow.db'}", db, full=found is not None)
        print(f"index: {stats.summary()}", flush=True)
    return store, db


def index_version(db: Path) -> str | None:
    """The schema version recorded in the index ``db``; None when there is no readable index there."""
    import duckdb

    if not db.exists():
        return None
    try:
        with duckdb.connect(str(db), read_only=True) as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.Error:
        return None
    return row[0] if row else None


def serve(cmd: list[str], env: dict, log: Path) -> tuple[subprocess.Popen, str, float]:
    """Start a server; its process, base URL and seconds until its health check answered."""
    port = int(cmd[cmd.index("--server.port") + 1])
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    while True:
        try:
            if urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).read().strip() == b"ok":
                return proc, base, time.perf_counter() - t0
        except OSError:
            if proc.poll() is not None or time.perf_counter() - t0 > 300:
                raise RuntimeError(f"{cmd[3]} did not come up; log:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.2)


async def _settle(page: Chromium, since: float = 0.0, timeout: float = 120.0) -> dict:
    """Wait until the page has drawn and stayed unchanged for ``QUIET_S`` with nothing running."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        await asyncio.sleep(0.1)
        s = json.loads(await page.evaluate(STATE))
        drawn = s.get("first") is not None or s.get("fallback") is not None
        if drawn and s["changed"] and not s["running"] and s["last"] > since and s["now"] - s["last"] >= QUIET_S:
            return s
    raise TimeoutError(f"page did not settle within {timeout:.0f} s: {s}")


async def open_page(page: Chromium, url: str) -> tuple[float, float]:
    """(first, idle) in seconds from navigation start."""
    await page.goto("about:blank")
    await page.goto(url)
    s = await _settle(page)
    first = s["first"] if s.get("first") is not None else s["fallback"]
    return first / 1000, s["last"] / 1000


async def _click(page: Chromium, selector: str) -> None:
    box = await page.evaluate(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
        if (!e) return null; const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2] }})()""")
    if box is None:
        raise RuntimeError(f"nothing matches {selector}")
    for kind in ("mousePressed", "mouseReleased"):
        await page.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)


async def interact(page: Chromium, key: str) -> float:
    """Pick the first option not selected of the select box with widget key ``key``; seconds from the click on
    the option to idle."""
    option_css = '[role="listbox"] [role="option"][aria-selected="false"]'
    for _ in range(3):  # a click that lands while the widget is still being drawn opens nothing: click again
        await _click(page, f'.st-key-{key} button[aria-haspopup="listbox"]')
        if await page.wait_for(f"!!document.querySelector({json.dumps(option_css)})", 15):
            break
    else:
        raise RuntimeError(f"the options of {key} did not open")
    await page.evaluate(BEFORE)  # the rerun has drawn when the page's text changed (the ranking, the chart's axis)
    t0 = json.loads(await page.evaluate(STATE))["now"]
    await _click(page, option_css)
    s = await _settle(page, since=t0)
    return (s["last"] - t0) / 1000


async def measure(lb: str, minimal: str, repeats: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}

    def add(name: str, what: str, value: float) -> None:
        out.setdefault(name, {}).setdefault(what, []).append(value)

    async with Chromium() as page:
        await page.call("Page.addScriptToEvaluateOnNewDocument", source=PROBE)
        for r in range(repeats):
            first, idle = await open_page(page, minimal + "/")
            add("minimal", "first", first)
            add("minimal", "idle", idle)
            add("minimal", "interaction", await interact(page, MINIMAL_KEY))
            print(f"  minimal: first {first:.2f} s, idle {idle:.2f} s, rerun {out['minimal']['interaction'][-1]:.2f} s",
                  flush=True)
            for name, path in PAGES.items():
                first, idle = await open_page(page, f"{lb}/{path}")
                add(name, "first", first)
                add(name, "idle", idle)
                click = ""
                if name == INTERACTION[0]:
                    add(name, "interaction", await interact(page, INTERACTION[1]))
                    click = f", interaction {out[name]['interaction'][-1]:.2f} s"
                print(f"  {name}: first {first:.2f} s, idle {idle:.2f} s{click}", flush=True)
            print(f"  round {r + 1}/{repeats} done", flush=True)
    return out


async def fresh_first(lb: str) -> tuple[float, float]:
    async with Chromium() as page:
        await page.call("Page.addScriptToEvaluateOnNewDocument", source=PROBE)
        return await open_page(page, lb + "/")


# What a page holds once idle: DOM nodes, Plotly charts, their traces and the points (or heatmap cells) they draw.
CONTENT = """JSON.stringify((() => {
  const plots = Array.from(document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot'));
  const traces = plots.flatMap(p => p.data || []);
  const n = a => (a && typeof a === 'object' && a.length !== undefined) ? a.length : 0;
  const cells = z => Array.from(z).reduce((t, row) => t + Math.max(1, n(row)), 0);
  const points = traces.reduce((t, d) => t + (n(d.z) ? cells(d.z) : Math.max(n(d.x), n(d.y))), 0);
  return {nodes: document.getElementsByTagName('*').length, charts: plots.length, traces: traces.length,
          points, tables: document.querySelectorAll('[data-testid="stDataFrame"]').length};
})())"""
TRACE_CATEGORIES = "devtools.timeline,disabled-by-default-devtools.timeline,disabled-by-default-v8.cpu_profiler"


async def _trace_events(page: Chromium) -> list[dict]:
    """Stop tracing and gather its events (they arrive as ``Tracing.dataCollected`` messages)."""
    page.events.clear()
    await page.call("Tracing.end")
    deadline = time.perf_counter() + 120
    while not any(e["method"] == "Tracing.tracingComplete" for e in page.events):
        if time.perf_counter() > deadline:
            raise TimeoutError("Chromium did not finish its trace within 120 s")
        await page.evaluate("1")
        await asyncio.sleep(0.1)
    return [x for e in page.events if e["method"] == "Tracing.dataCollected" for x in e["params"]["value"]]


def _summarise_trace(events: list[dict], t0_us: float, first_us: float, t1_us: float) -> dict:
    """What the renderer's main thread did between navigation (``t0_us``, trace clock) and idle (``t1_us``): its
    busy time (wall), its CPU time in all and up to the first chart (``first_us``; CPU is what the load does not
    stretch), its layout and style time, and JavaScript self time by script bundle (Streamlit's chunk names
    without their hash: ``PlotlyChart``, ``DataFrame``, ``index``…)."""
    main = {(e["pid"], e["tid"]) for e in events if e.get("name") == "thread_name"
            and e.get("args", {}).get("name") == "CrRendererMain"}
    tasks = [e for e in events if (e.get("pid"), e.get("tid")) in main and e.get("ph") == "X"
             and e.get("name") == "RunTask" and t0_us <= e.get("ts", 0) <= t1_us]
    out = {"busy": sum(e.get("dur", 0) for e in tasks) / 1e6,
           "cpu": sum(e.get("tdur", e.get("dur", 0)) for e in tasks) / 1e6,
           "cpu_first": sum(e.get("tdur", e.get("dur", 0)) for e in tasks if e["ts"] <= first_us) / 1e6,
           "layout": 0.0}
    for e in events:
        if (e.get("pid"), e.get("tid")) in main and e.get("ph") == "X" and t0_us <= e.get("ts", 0) <= t1_us \
                and e.get("name") in ("Layout", "UpdateLayoutTree"):
            out["layout"] += e.get("dur", 0) / 1e6
    # the sampling profiler: nodes (with their script's url) and samples with the time since the previous one
    # (from the profile's start time, in the trace clock)
    nodes, js, js_first = {}, {}, {}
    clock = {e.get("id"): e["args"]["data"].get("startTime", 0) for e in events if e.get("name") == "Profile"}
    for e in sorted((e for e in events if e.get("name") == "ProfileChunk"), key=lambda e: e.get("ts", 0)):
        data = e.get("args", {}).get("data", {})
        prof = data.get("cpuProfile", {})
        for node in prof.get("nodes", ()):
            url = node.get("callFrame", {}).get("url", "")
            func = node.get("callFrame", {}).get("functionName") or "native"
            name = url.rsplit("/", 1)[-1].split(".")[0] if url else func if func.startswith("(") else f"({func})"
            nodes[(e["pid"], node["id"])] = name
        for sample, delta in zip(prof.get("samples", ()), data.get("timeDeltas", ()), strict=False):
            clock[e.get("id")] = clock.get(e.get("id"), 0) + delta
            name = nodes.get((e["pid"], sample), "(unknown)")
            js[name] = js.get(name, 0.0) + delta / 1e6
            if t0_us <= clock[e.get("id")] <= first_us:
                js_first[name] = js_first.get(name, 0.0) + delta / 1e6
    skip = ("(idle)", "(program)", "(garbage collector)")
    js_first = {k: v for k, v in js_first.items() if k not in skip}
    out["js_first"] = dict(sorted(js_first.items(), key=lambda kv: -kv[1])[:5])
    js = {k: v for k, v in js.items() if k not in skip}
    return {**out, "js": dict(sorted(js.items(), key=lambda kv: -kv[1])[:5])}


async def profile_page(page: Chromium, url: str) -> dict:
    """One visit of ``url`` under Chromium's tracing: when the server's websocket messages came (page clock) and how
    many bytes, what the renderer's main thread spent its time on, and what the page holds once idle."""
    await page.goto("about:blank")
    await asyncio.sleep(0.5)
    await page.call("Network.enable", maxTotalBufferSize=64 * 1024 * 1024)
    await page.call("Tracing.start", categories=TRACE_CATEGORIES, transferMode="ReportEvents")
    page.events.clear()
    await page.goto(url)
    s = await _settle(page)
    content = json.loads(await page.evaluate(CONTENT))
    frames = [e["params"] for e in page.events if e["method"] == "Network.webSocketFrameReceived"]
    nav = next((e["params"] for e in page.events if e["method"] == "Network.requestWillBeSent"
                and e["params"].get("type") == "Document"), None)
    await page.call("Network.disable")
    events = await _trace_events(page)
    t0 = nav["timestamp"] if nav else frames[0]["timestamp"] if frames else 0.0
    sizes = [len(f["response"]["payloadData"]) * (3 / 4 if f["response"]["opcode"] == 2 else 1) for f in frames]
    ws_times = [f["timestamp"] - t0 for f in frames]
    # the first message carrying a table (Arrow data with its pandas metadata), i.e. when the server sent the grid's rows
    tables = [t for f, t in zip(frames, ws_times, strict=True) if f["response"]["opcode"] == 2
              and b"index_columns" in base64.b64decode(f["response"]["payloadData"])]
    # the trace's clock is the monotonic clock of the Network domain's timestamps, in microseconds
    first = s["first"] if s.get("first") is not None else s["fallback"]
    summary = _summarise_trace(events, t0 * 1e6, t0 * 1e6 + first * 1000, t0 * 1e6 + s["last"] * 1000)
    return {"first": first / 1000, "idle": s["last"] / 1000,
            "ws_messages": len(frames), "ws_kb": sum(sizes) / 1024, "ws_max_kb": max(sizes, default=0) / 1024,
            "ws_first": min(ws_times, default=float("nan")), "ws_last": max(ws_times, default=float("nan")),
            "ws_table": min(tables, default=float("nan")),
            "ws_before_table": sum(t < min(tables, default=float("inf")) for t in ws_times),
            **content, **summary}


async def profile(lb: str, minimal: str) -> dict[str, dict]:
    out = {}
    async with Chromium() as page:
        await page.call("Page.addScriptToEvaluateOnNewDocument", source=PROBE)
        for name, url in {"minimal": minimal + "/", **{n: f"{lb}/{p}" for n, p in PAGES.items()}}.items():
            out[name] = await profile_page(page, url)
            print(f"  profile {name}: {json.dumps(out[name])}", flush=True)
    return out


def print_profile(prof: dict[str, dict]) -> None:
    print(f"\n{'page':<11}{'first':>6}{'idle':>6}{'ws msgs':>8}{'ws kB':>7}{'max kB':>7}{'ws last':>8}{'CPU 1st':>8}"
          f"{'CPU':>6}{'busy':>6}{'layout':>7}{'nodes':>6}{'charts':>7}{'traces':>7}{'points':>7}"
          "  JS self time (s) by bundle")
    for name, p in prof.items():
        js = ", ".join(f"{k} {v:.2f}" for k, v in p["js"].items())
        js += "; up to the first chart: " + ", ".join(f"{k} {v:.2f}" for k, v in p.get("js_first", {}).items())
        print(f"{name:<11}{p['first']:6.2f}{p['idle']:6.2f}{p['ws_messages']:8d}{p['ws_kb']:7.0f}{p['ws_max_kb']:7.0f}"
              f"{p['ws_last']:8.2f}{p['ws_table']:9.2f}{p['ws_before_table']:7d}{p['cpu_first']:8.2f}{p['cpu']:6.2f}{p['busy']:6.2f}{p['layout']:7.2f}"
              f"{p['nodes']:6d}{p['charts']:7d}{p['traces']:7d}{p['points']:7d}  {js}")


def apptest_times(db: Path, repeats: int) -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from countboard.paths import leaderboard_dir
    from leaderboard_render import INTERACTIONS, time_page

    os.environ["COUNTBOARD_INDEX_DB"] = str(db)
    sys.path.insert(0, str(leaderboard_dir()))
    return {name: time_page(page, repeats)[0] for name, page in APPTEST_PAGES.items() if page in INTERACTIONS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30_000)
    ap.add_argument("--metrics", type=int, default=100)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "countboard-browser-bench")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--apptest", action="store_true", help="also time each page's script with AppTest")
    ap.add_argument("--store", type=Path, help="an existing store folder (its mlflow.db) to open instead of "
                                                 "generating one under --workdir")
    ap.add_argument("--db", type=Path, help="its index (built there when missing or of another schema version; "
                                              "default: index.duckdb in the store)")
    ap.add_argument("--pages", help="comma-separated pages to open (default: all of " + ", ".join(PAGES) + ")")
    ap.add_argument("--profile", action="store_true",
                    help="after the timed rounds, visit each page once more under Chromium's tracing and print "
                         "the websocket messages, main-thread time, JavaScript time by bundle and what it drew")
    args = ap.parse_args(argv)
    if args.repeats < 3 and not (args.profile and args.repeats == 0):
        ap.error("--repeats must be at least 3 (medians), or 0 with --profile (the profile alone)")
    if args.pages:
        unknown = set(args.pages.split(",")) - set(PAGES)
        if unknown:
            ap.error(f"--pages: no page {', '.join(sorted(unknown))} (pages: {', '.join(PAGES)})")
        for name in set(PAGES) - set(args.pages.split(",")):
            del PAGES[name]
    logging.disable(logging.WARNING)
    args.workdir.mkdir(parents=True, exist_ok=True)
    store, db = build(args.workdir, args.runs, args.metrics, args.store, args.db)
    minimal_py = args.workdir / "minimal.py"
    minimal_py.write_text(MINIMAL)
    env = {**os.environ, "COUNTBOARD_INDEX_DB": str(db), "COUNTBOARD_STORE": f"sqlite:///{store / 'mlflow.db'}"}
    lb_cmd = leaderboard_command(db, "127.0.0.1", _free_port())
    settings = [x for k, v in STREAMLIT_SETTINGS.items() for x in (f"--{k}", v)]
    min_cmd = [sys.executable, "-m", "streamlit", "run", str(minimal_py), "--server.address", "127.0.0.1",
               "--server.port", str(_free_port()), *settings]
    print(f"load before: {os.getloadavg()[0]:.1f} (1-min average; 2 cores)", flush=True)
    procs = []
    try:
        lb_proc, lb, lb_up = serve(lb_cmd, env, args.workdir / "leaderboard.log")
        procs.append(lb_proc)
        fresh = asyncio.run(fresh_first(lb))
        print(f"fresh server: up in {lb_up:.1f} s; its first Overview: first {fresh[0]:.2f} s, idle {fresh[1]:.2f} s",
              flush=True)
        min_proc, minimal, _ = serve(min_cmd, env, args.workdir / "minimal.log")
        procs.append(min_proc)
        asyncio.run(fresh_first(minimal))  # the minimal page's own imports, before it is timed
        times = asyncio.run(measure(lb, minimal, args.repeats)) if args.repeats else {}
        prof = asyncio.run(profile(lb, minimal)) if args.profile else {}
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
    load = os.getloadavg()[0]
    if not times:
        print(f"\nprofile only; load after: {load:.1f}")
        print_profile(prof)
        return 0
    apptest = apptest_times(db, args.repeats) if args.apptest else {}
    med = {name: {k: statistics.median(v) for k, v in d.items()} for name, d in times.items()}
    base = med["minimal"]
    print(f"\n{args.runs} runs x {args.metrics} metrics; medians of {args.repeats}; load after: {load:.1f}")
    print(f"{'page':<11}{'first (s)':>10}{'/minimal':>9}{'idle (s)':>10}{'/minimal':>9}{'AppTest (s)':>12}")
    misses = []
    for name, m in med.items():
        rf, ri = m["first"] / base["first"], m["idle"] / base["idle"]
        at = f"{apptest[name]:12.2f}" if name in apptest else f"{'':>12}"
        print(f"{name:<11}{m['first']:10.2f}{rf:9.2f}{m['idle']:10.2f}{ri:9.2f}{at}")
        if name != "minimal" and (rf > FIRST_TARGET or ri > IDLE_TARGET):
            misses.append(name)
    beyond = None
    if INTERACTION[0] in med:
        beyond = med[INTERACTION[0]]["interaction"] - base["interaction"]
        print(f"interaction ({INTERACTION[0]} {INTERACTION[1]}): {med[INTERACTION[0]]['interaction']:.2f} s; minimal "
              f"page's rerun {base['interaction']:.2f} s; beyond it {beyond:+.2f} s "
              f"(target <= {INTERACTION_BEYOND_S} s)")
    warm = (f" (warm Overview: {med['overview']['first']:.2f} / {med['overview']['idle']:.2f} s; excess "
            f"{fresh[0] - med['overview']['first']:+.2f} / {fresh[1] - med['overview']['idle']:+.2f} s)"
            if "overview" in med else "")
    print(f"fresh server: up in {lb_up:.1f} s; its first Overview: first {fresh[0]:.2f} s, idle {fresh[1]:.2f} s"
          + warm)
    if prof:
        print_profile(prof)
    ok = not misses and (beyond is None or beyond <= INTERACTION_BEYOND_S)
    print("targets met" if ok else f"targets NOT met: {', '.join(misses) or 'interaction'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
