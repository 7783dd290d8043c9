"""Every published page in Debian's headless Chromium, from ``file://`` and from a static server on 127.0.0.1
(Python's ``http.server``): no console error, no request outside the site, tables and charts drawn."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading

import pytest

from countboard.publish import Options, build_site
from tests.fixtures.browser import MISSING, Watched, browser

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=f"headless browser test {MISSING}")]


@contextlib.contextmanager
def static_server(folder):
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _check_page(w: Watched, url: str, inside: str, rel: str) -> None:
    w.clear()
    w.page.goto(url)
    w.page.wait_for_function("document.body.getAttribute('data-charts-drawn') !== null", timeout=60_000)
    charts = w.page.locator("script[data-chart]").count()
    assert w.page.get_attribute("body", "data-charts-drawn") == str(charts), rel
    assert w.page.locator(".chart[data-drawn='true'] .main-svg").count() >= charts, rel
    if rel.startswith("benchmarks/"):
        assert w.page.locator("table.ranking tbody tr").count() > 0 and charts > 0, rel
    if rel.startswith("entries/"):
        assert w.page.locator("dl.prov").count() > 0, rel
    assert w.console_errors == [], (rel, w.console_errors)
    outside = [u for u in w.requests if not u.startswith(inside) and not u.startswith("data:")]
    assert outside == [], (rel, outside)


def test_every_page_from_file_and_from_a_static_server(small_index, tmp_path):
    site = build_site(small_index[1], tmp_path / "site", Options(base_url="https://example.org/board")).out
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    assert len(pages) > 20
    with browser() as b, static_server(site) as root:
        w = Watched(b, width=1280, height=800)
        for rel in pages:
            _check_page(w, (site / rel).as_uri(), site.as_uri(), rel)
            _check_page(w, root + rel, root, rel)
