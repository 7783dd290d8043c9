"""``streamlit run`` of the leaderboard, its modules imported while the server starts.

A fresh Streamlit server imports what a page needs (pandas, DuckDB, Plotly, SciPy and the app's own modules) when
the first visitor's script runs, and that visitor waits for it. ``countboard leaderboard`` runs Streamlit through
this module instead, which imports the app's modules (``WARM``) in a background thread as the server starts: by
the time a browser connects they are in ``sys.modules``, where the page's ``import`` finds them (a visitor who
comes first waits only for what is left). ``python -m countboard.commands.leaderboard_serve run APP [options]``
takes ``streamlit``'s own arguments.

It also tells Streamlit's client where the server is when a page is opened by its own address (``/runs``, a
bookmark, a reload, a link from the MLflow UI): without that, the client first asks ``/runs/_stcore/health``, gets a
404, waits 100 ms and asks ``/`` — 0.2 s before the page's script even starts (``benchmarks/leaderboard_browser.py``:
a one-table page at a page's address took 0.95 s to its table against 0.73 s at ``/``). The page's HTML gets a
script that sets ``window.__streamlit.BACKEND_BASE_URL`` (Streamlit's setting for an app served under another
path) to the address without the page's name (``PageBaseUrl``), so that a server behind a proxy's path prefix is
still found.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import sys
import threading
from pathlib import Path

from countboard.paths import LEADERBOARD_PAGE_PATHS

log = logging.getLogger(__name__)

#: The app's shared modules (``leaderboard/``), in the order the pages import them; they import the rest.
WARM = ("data", "queries", "labels", "ranking", "widgets", "figures", "sections", "galleries", "family")


def warm(app_dir: str, wait_s: float = 60.0) -> None:
    """Import ``WARM`` from the app's folder (the folder Streamlit puts on ``sys.path`` for the app), once the
    Streamlit runtime exists (``st.cache_data`` binds a function to the runtime's caches when it is decorated)."""
    import time

    from streamlit.runtime import Runtime

    deadline = time.monotonic() + wait_s
    while not Runtime.exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    if app_dir not in sys.path:
        sys.path.insert(0, app_dir)
    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the page will import it again and show its own error
            log.debug("warm-up import of %s failed: %s", name, exc)


def base_url_script(page_paths: tuple[str, ...]) -> bytes:
    """A ``<script>`` that, on a page's own address (``…/runs``), sets ``window.__streamlit.BACKEND_BASE_URL`` to
    that address without the page's name, so that Streamlit's client connects there at once; elsewhere it does
    nothing (an address the client already resolves).

    Example:
        >>> b"new RegExp(\\"/(?:runs|acs)/?$\\")" in base_url_script(("runs", "acs"))
        True
    """
    pattern = "/(?:" + "|".join(re.escape(p) for p in page_paths if p) + ")/?$"
    return ("<script>(() => {"
            f"const page = new RegExp({json.dumps(pattern)});"
            "if (!page.test(location.pathname) || (window.__streamlit || {}).BACKEND_BASE_URL) return;"
            "const base = new URL(location.href);"
            "base.pathname = base.pathname.replace(page, '/'); base.search = ''; base.hash = '';"
            "window.__streamlit = Object.assign({}, window.__streamlit, {BACKEND_BASE_URL: base.href});"
            "})()</script>").encode()


# Requests that never answer with the app's page: Streamlit's endpoints and files.
_NOT_PAGES = ("/_stcore/", "/static/", "/media/", "/component/", "/app/static/")


class PageBaseUrl:
    """ASGI wrapper of Streamlit's app: the app's HTML page (``index.html``, served for ``/`` and every page's
    address) gets ``script`` at the start of its ``<head>``, before Streamlit's client code, when the address the
    server was asked for ends with one of ``page_paths``; every other request and response passes unchanged. The
    server decides, not the page: behind a proxy whose path prefix is itself a page's name (the board served at
    ``https://lab/runs/``), the browser's address ``/runs/`` is the Overview, and the server, asked for ``/``,
    leaves it as Streamlit serves it. The page is asked for uncompressed and without validators (it is 8 kB and
    rewritten here; Streamlit already sends it with ``no-cache``)."""

    def __init__(self, app, script: bytes, page_paths: tuple[str, ...], base_path: str = ""):
        self.app = app
        self.script = script
        self.page_paths = frozenset(p for p in page_paths if p)
        self.base = "/" + base_path.strip("/") if base_path.strip("/") else ""  # Streamlit's server.baseUrlPath

    def on_page(self, path: str) -> bool:
        """Whether ``path`` (as the server got it) is a page's own address, not the Overview's."""
        if self.base and (path == self.base or path.startswith(self.base + "/")):
            path = path[len(self.base):]
        return path.rstrip("/").rsplit("/", 1)[-1] in self.page_paths

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope.get("type") != "http" or scope.get("method") not in ("GET", "HEAD") \
                or any(part in path for part in _NOT_PAGES) or not self.on_page(path):
            await self.app(scope, receive, send)
            return
        dropped = {b"accept-encoding", b"if-none-match", b"if-modified-since"}
        scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers", []) if k.lower() not in dropped]}
        start: dict | None = None
        body: list[bytes] = []

        async def rewrite(message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                if headers.get(b"content-type", b"").startswith(b"text/html") \
                        and b"content-encoding" not in headers and message.get("status") == 200:
                    start = message  # held until the whole body is here
                    return
                await send(message)
            elif start is not None and message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                html = b"".join(body)
                if scope["method"] == "GET":
                    html = html.replace(b"<head>", b"<head>" + self.script, 1)
                    length = len(html)
                else:  # HEAD: no body, the length the page will have
                    length = int(dict(start.get("headers", [])).get(b"content-length", b"0")) + len(self.script)
                headers = [(k, v) for k, v in start.get("headers", [])
                           if k.lower() not in (b"content-length", b"etag", b"last-modified")]
                headers.append((b"content-length", str(length).encode()))
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": html if scope["method"] == "GET" else b""})
            else:
                await send(message)

        await self.app(scope, receive, rewrite)


def _serve_page_base_url(page_paths: tuple[str, ...]) -> None:
    """Wrap the app Streamlit's server builds in ``PageBaseUrl`` (Streamlit's Starlette server; another server
    leaves the page as Streamlit serves it, and only the first load of a page's own address is slower)."""
    try:
        from streamlit.web.server.starlette import starlette_server
    except ImportError:
        log.debug("no Starlette server in this Streamlit: pages are served unchanged")
        return
    build = getattr(starlette_server, "create_starlette_app", None)
    if build is None:
        log.debug("Streamlit's server builds its app elsewhere: pages are served unchanged")
        return
    script = base_url_script(page_paths)

    def wrapped(runtime):
        from streamlit import config

        return PageBaseUrl(build(runtime), script, page_paths, config.get_option("server.baseUrlPath") or "")

    starlette_server.create_starlette_app = wrapped


def main(argv: list[str] | None = None) -> int:
    from streamlit.web import cli

    argv = sys.argv[1:] if argv is None else argv
    app = next((a for a in argv if a.endswith(".py")), None)
    if app is not None:
        threading.Thread(target=warm, args=(str(Path(app).resolve().parent),), name="warm-up", daemon=True).start()
    _serve_page_base_url(LEADERBOARD_PAGE_PATHS)
    sys.argv = ["streamlit", *argv]
    return cli.main(prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main())
