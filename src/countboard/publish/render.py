"""HTML of the published pages: plain strings, every text from the store escaped (``esc``), links relative so that
the site opens from ``file://`` and from any folder of a static host. Charts are Plotly specs embedded as JSON
(``chart``) that ``assets/site.js`` draws with the shipped ``plotly.min.js``; nothing is fetched.
"""

from __future__ import annotations

import html
import json
import math

import numpy as np

MISSING = "—"


def esc(value) -> str:
    """Text for HTML, quotes included (an attribute value too).

    Example:
        >>> esc('<b a="1">&')
        '&lt;b a=&quot;1&quot;&gt;&amp;'
    """
    return html.escape("" if value is None else str(value), quote=True)


def fmt(value, spec: str = ".3f") -> str:
    """A number in the schema's format (``d``: a whole number), a dash when missing.

    Example:
        >>> fmt(3.0, "d"), fmt(0.12345), fmt(float("nan")), fmt(None)
        ('3', '0.123', '—', '—')
    """
    if value is None:
        return MISSING
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return MISSING
    spec = spec or ".3f"
    return format(int(round(v)), spec) if spec.endswith("d") else format(v, spec)


def json_script(data) -> str:
    """JSON safe inside a ``<script>`` element: ``<``, ``>`` and ``&`` as escapes, so that no store string can close
    the element.

    Example:
        >>> json_script({"a": "</script>"})
        '{"a": "\\\\u003c/script\\\\u003e"}'
    """
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, allow_nan=False, default=_json_default)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _json_default(v):
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return None if np.isnan(v) else float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"not JSON: {type(v).__name__}")


def clean(value):
    """A value for JSON: NaN and infinities become null, numpy scalars Python numbers (recursively)."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return [clean(v) for v in value.tolist()]
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    if isinstance(value, float | np.floating):
        return None if not math.isfinite(float(value)) else float(value)
    return value


def chart(chart_id: str, spec: dict, title: str) -> str:
    """A chart's place and its spec; ``site.js`` draws it (``data-drawn`` is set on the element once drawn)."""
    return (f'<figure class="chart-box"><figcaption>{esc(title)}</figcaption>'
            f'<div class="chart" id="{esc(chart_id)}" role="img" aria-label="{esc(title)}"></div>'
            f'<script type="application/json" data-chart="{esc(chart_id)}">{json_script(clean(spec))}</script>'
            "</figure>")


def table(headers: list[tuple[str, str]], rows: list[list], cls: str = "ranking") -> str:
    """A table of cells already made HTML (``esc`` them), or (HTML, class) pairs (``num``); headers are (text,
    tooltip), escaped here."""
    head = "".join(f'<th title="{esc(tip)}">{esc(text)}</th>' if tip else f"<th>{esc(text)}</th>"
                   for text, tip in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<div class="table-wrap"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def num(value, spec: str = ".3f") -> tuple[str, str]:
    """A number cell (right-aligned) for ``table``."""
    return esc(fmt(value, spec)), "num"


def _cell(c) -> str:
    return f'<td class="{c[1]}">{c[0]}</td>' if isinstance(c, tuple) else f"<td>{c}</td>"


def link(href: str, text) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def page(title: str, body: str, depth: int, site_title: str, base_url: str = "", path: str = "",
         charts: bool = False, nav: list[tuple[str, str]] = ()) -> str:
    """A whole page. ``depth``: folders between the page and the site's root (links climb that many). With
    ``base_url`` the page names its canonical address; nothing else uses it (every link is relative)."""
    up = "../" * depth
    canonical = f'<link rel="canonical" href="{esc(base_url.rstrip("/") + "/" + path)}">' if base_url else ""
    scripts = (f'<script src="{up}assets/plotly.min.js"></script>' if charts else "") + \
        f'<script src="{up}assets/site.js"></script>'
    links = "".join(f'<a href="{esc(up + href)}">{esc(text)}</a>' for href, text in nav)
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, '
            f'initial-scale=1"><title>{esc(title)} · {esc(site_title)}</title>'
            f'<link rel="icon" href="{up}assets/favicon.svg" type="image/svg+xml">'
            f'<link rel="stylesheet" href="{up}assets/site.css">{canonical}</head>\n'
            f'<body><header><a class="home" href="{up}index.html">{esc(site_title)}</a><nav>{links}</nav></header>\n'
            f"<main><h1>{esc(title)}</h1>\n{body}\n</main>\n"
            '<footer>Published by <code>countboard publish</code> from the DuckDB index of an MLflow store; every '
            'table is also in <code>data/</code> as CSV and JSON.</footer>\n'
            f"{scripts}</body></html>\n")
