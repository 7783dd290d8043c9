"""The browser tests' driver (``tests/fixtures/browser.py``) sees what they check: console errors, uncaught
exceptions, failed loads, requests outside 127.0.0.1, and leaves a screenshot when a step fails."""

from __future__ import annotations

import http.server
import threading

import pytest
from tests.fixtures.browser import MISSING, Watched, browser

PAGE = b"""<html><body><h1>probe</h1>
<img src="/missing.png">
<img src="http://example.invalid/x.png">
<script>console.error("planted error"); setTimeout(() => { throw new Error("planted throw"); }, 0);</script>
</body></html>"""

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the standard library's name)
        found = self.path == "/"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(PAGE if found else b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def served():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_watched_page_records_errors_and_requests_and_shoots_on_failure(served, tmp_path):
    with browser() as b:
        watched = Watched(b, width=640, height=400, timeout_s=30)
        watched.page.goto(served + "/")
        watched.page.wait_for_timeout(1500)
        errors, requests = list(watched.console_errors), list(watched.requests)
        with pytest.raises(AssertionError), watched.shot_on_failure(tmp_path / "failure.png"):
            raise AssertionError("a failing step")
    assert any("planted error" in e for e in errors), errors
    assert any("planted throw" in e for e in errors), errors
    assert any("404" in e for e in errors), errors
    assert "http://example.invalid/x.png" in requests and f"{served}/missing.png" in requests, requests
    assert (tmp_path / "failure.png").stat().st_size > 1000
