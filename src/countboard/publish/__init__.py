"""The leaderboard published as a static site: ``countboard publish OUT/`` writes pages, CSV/JSON tables and
images from the DuckDB index that open from ``file://`` or any static host (no server, no outside request).

- ``collect``: the rankings the board shows (its query, its rank rule, tie groups, P(A > B)), per benchmark.
- ``provenance``: what each run's tags, params and metrics say about where a number comes from.
- ``references``: the seed papers' values (``references.csv``) matched to our entries.
- ``render`` and ``pages``: escaped HTML; ``machine``: CSV/JSON with a versioned schema and ``compare_sites``.
- ``site``: ``build_site``, which writes it all into a new folder swapped in at the end.

To add something to a benchmark page: compute it in ``collect`` (or ``site`` when it reads artifacts), draw it in
``pages`` and give it a table in ``site._files`` so that it is published as data too.
"""

import importlib

_LAZY = {"Options": "collect", "build_site": "site", "compare_sites": "machine"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
