"""The index damaged under a running board, in a real browser: headless Chromium (Debian's, through Playwright)
on ``countboard leaderboard``'s ``streamlit run`` on 127.0.0.1. The reloaded page shows one line naming the index
and the command that rebuilds it, no traceback and no Streamlit error box; once that command has run, the next
reload shows the page again, the server never restarted.

Needs the Debian package ``chromium`` and the ``playwright`` package (the ``dev`` extra); skipped with that reason
when either is absent.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from pathlib import Path

import pytest
from tests.fixtures.browser import MISSING, Watched, board_server, browser

from countboard import cli

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "leaderboard"
PROBE = """JSON.stringify({
  links: document.querySelectorAll('[data-testid="stPageLink"]').length,
  exceptions: document.querySelectorAll('[data-testid="stException"]').length,
  running: !!document.querySelector('[data-testid="stStatusWidget"]'),
  text: document.body.innerText})"""

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=f"headless browser test {MISSING}")]


@pytest.fixture
def served(filled_index, tmp_path):
    """``streamlit run`` of the app over a copy of the filled index, bound to loopback; (base URL, index path)."""
    store, source = filled_index
    db = tmp_path / "index.duckdb"
    shutil.copyfile(source, db)
    log = tmp_path / "server.log"
    env = {**os.environ, "COUNTBOARD_INDEX_DB": str(db), "COUNTBOARD_STORE": store.uri,
           "COUNTBOARD_MLFLOW_UI": "http://127.0.0.1:5000"}
    with board_server(db, log, env) as base:
        yield base, db, log


def _wait_for(page, done, timeout: float = 90.0) -> dict:
    """Probe the page until ``done(probe)`` holds and the script has stopped, twice in a row (or time is up)."""
    import json

    deadline, stable, probe = time.time() + timeout, 0, {}
    page.wait_for_timeout(1000)
    while time.time() < deadline:
        probe = json.loads(page.evaluate(PROBE))
        stable = stable + 1 if done(probe) and not probe["running"] else 0
        if stable >= 2 or probe["exceptions"]:
            return probe
        page.wait_for_timeout(500)
    return probe


def test_an_index_damaged_under_the_board_is_one_line_and_the_page_comes_back(served, filled_index):
    base, db, log = served
    store, _ = filled_index
    with browser() as b:
        watched = Watched(b, width=1280, height=1600)
        page = watched.page
        with watched.shot_on_failure(ARTIFACTS / "index-damaged-failure.png"):
            page.goto(f"{base}/")
            probe = _wait_for(page, lambda p: p["links"] > 0)
            assert probe["links"] and not probe["exceptions"], probe["text"][-2000:]

            size = db.stat().st_size
            with open(db, "r+b") as f:  # written over in the middle, in place (same inode)
                f.seek(size // 2)
                f.write(b"\xa5" * 16384)
            page.reload()
            probe = _wait_for(page, lambda p: "cannot be read" in p["text"])
            text = probe["text"]
            watched.screenshot(ARTIFACTS / "index-damaged.png")
            assert "Traceback" not in text and "This app has encountered an error" not in text, text[-3000:]
            assert not probe["exceptions"]
            lines = [line for line in text.splitlines() if "cannot be read" in line]
            assert len(lines) == 1 and str(db) in lines[0] and "countboard index" in lines[0], text[-3000:]

            # the command as a reader copies it from the line (its sentence goes on after a comma)
            command = re.search(r"(countboard index .*?--db \S+)", lines[0]).group(1).rstrip(",.")
            argv = shlex.split(command)
            assert argv[argv.index("--store") + 1] == str(store.store_dir)
            assert cli.main(argv[1:]) == 0

            page.reload()
            probe = _wait_for(page, lambda p: p["links"] > 0)
            assert probe["links"] and not probe["exceptions"] and "cannot be read" not in probe["text"]
            assert "Traceback" not in log.read_text()
