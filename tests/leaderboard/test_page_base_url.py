"""The leaderboard's server tells Streamlit's client where it is on a page's own address (``PageBaseUrl``): the
HTML page gets one script before the client's code, every other response passes unchanged."""

from __future__ import annotations

import asyncio

import pytest

from countboard.commands.leaderboard_serve import PageBaseUrl, _serve_page_base_url, base_url_script
from countboard.paths import LEADERBOARD_PAGE_PATHS, LEADERBOARD_PAGES, leaderboard_dir

HTML = b"<!DOCTYPE html><html><head><title>x</title><script type=module src=./static/js/index.js></script></head></html>"
SCRIPT = base_url_script(("counters", "runs"))


def serve(path: str, body: bytes, content_type: bytes, method: str = "GET", chunks: int = 1,
          encoding: bytes | None = None):
    """Run ``PageBaseUrl`` over an app that answers ``body``; returns (request headers the app saw, messages sent)."""
    seen: dict = {}

    async def app(scope, receive, send):
        seen["headers"] = dict(scope["headers"])
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                   (b"etag", b'"abc"'), (b"cache-control", b"no-cache")]
        if encoding:
            headers.append((b"content-encoding", encoding))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        step = max(1, -(-len(body) // chunks))
        parts = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
        for i, part in enumerate(parts):
            await send({"type": "http.response.body", "body": part if method == "GET" else b"",
                        "more_body": i < len(parts) - 1})

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request"}

    scope = {"type": "http", "method": method, "path": path,
             "headers": [(b"accept-encoding", b"gzip"), (b"if-none-match", b'"abc"'), (b"host", b"x")]}
    asyncio.run(PageBaseUrl(app, SCRIPT, ("", "counters", "runs"))(scope, receive, send))
    return seen["headers"], sent


def body_of(sent: list[dict]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def headers_of(sent: list[dict]) -> dict:
    return dict(next(m for m in sent if m["type"] == "http.response.start")["headers"])


@pytest.mark.parametrize("path", ["/runs", "/runs/", "/board/counters"])
@pytest.mark.parametrize("chunks", [1, 3])
def test_the_page_gets_the_script_first_in_its_head(path, chunks):
    asked, sent = serve(path, HTML, b"text/html; charset=utf-8", chunks=chunks)
    html = body_of(sent)
    assert html == HTML.replace(b"<head>", b"<head>" + SCRIPT, 1)
    assert html.index(SCRIPT) < html.index(b"index.js")  # before Streamlit's client code
    headers = headers_of(sent)
    assert int(headers[b"content-length"]) == len(html)
    assert b"etag" not in headers and headers[b"cache-control"] == b"no-cache"
    assert b"accept-encoding" not in asked and b"if-none-match" not in asked  # plain, whole, rewritten here
    assert asked[b"host"] == b"x"


def test_head_requests_get_the_rewritten_length_and_no_body():
    _, sent = serve("/runs", HTML, b"text/html", method="HEAD")
    assert body_of(sent) == b""
    assert int(headers_of(sent)[b"content-length"]) == len(HTML) + len(SCRIPT)


@pytest.mark.parametrize(("path", "content_type", "encoding"), [
    # the Overview (also the board behind a proxy whose path prefix is a page's name: its /runs/ reaches the
    # server as /): the client finds the server where it is
    ("/", b"text/html", None),
    ("/board/", b"text/html", None),  # the Overview under Streamlit's own base path
    ("/elsewhere", b"text/html", None),  # not a page of this board
    ("/static/js/index.js", b"text/javascript", None),  # Streamlit's files
    ("/_stcore/health", b"text/plain", None),  # its endpoints
    ("/_stcore/host-config", b"application/json", None),
    ("/runs", b"application/json", None),  # not HTML
    ("/runs", b"text/html", b"gzip"),  # compressed by the app itself: left as it is
])
def test_everything_else_passes_unchanged(path, content_type, encoding):
    body = b"<head>payload</head>"
    _, sent = serve(path, body, content_type, encoding=encoding)
    assert body_of(sent) == body
    assert headers_of(sent)[b"content-length"] == str(len(body)).encode()


def test_the_script_names_every_page_of_the_board():
    script = base_url_script(LEADERBOARD_PAGE_PATHS).decode()
    assert set(LEADERBOARD_PAGE_PATHS) == {"counters", "numeracy", "acs", "grounding", "runs", "annotate"}
    for page in LEADERBOARD_PAGE_PATHS:
        assert f"|{page}" in script or f"(?:{page}" in script
    assert script.startswith("<script>") and script.endswith("</script>")


def test_every_page_has_its_module_and_streamlit_has_no_page_folder_of_its_own():
    """The app registers ``views/<module>.py`` for each page; a ``pages/`` folder beside ``app.py`` would be
    Streamlit's own page list, run without ``app.py`` when a page is opened by its address."""
    app_dir = leaderboard_dir()
    assert all((app_dir / "views" / f"{module}.py").is_file() for module, _ in LEADERBOARD_PAGES)
    assert not (app_dir / "pages").exists()


@pytest.mark.parametrize(("base", "path", "on_page"), [
    ("", "/runs", True), ("", "/runs/", True), ("", "/", False), ("", "/board/counters", True),
    ("runs", "/runs", False), ("runs", "/runs/", False), ("/runs/", "/runs/runs", True),
    ("runs", "/runs/counters/", True), ("board/x", "/board/x/", False), ("board/x", "/board/x/runs", True)])
def test_a_base_path_named_like_a_page_is_not_taken_for_it(base, path, on_page):
    """Streamlit's ``server.baseUrlPath`` (``runs``: the Overview at ``/runs/``) is cut off before the page's name
    is looked for."""
    assert PageBaseUrl(None, SCRIPT, ("", "counters", "runs"), base).on_page(path) is on_page


def test_streamlits_server_is_wrapped(monkeypatch):
    from streamlit.web.server.starlette import starlette_server

    built = object()
    monkeypatch.setattr(starlette_server, "create_starlette_app", lambda runtime: built)
    _serve_page_base_url(("runs",))
    wrapped = starlette_server.create_starlette_app(None)
    assert isinstance(wrapped, PageBaseUrl) and wrapped.app is built
