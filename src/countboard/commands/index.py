"""``countboard index``: build or update the DuckDB index of a store (``countboard leaderboard`` serves it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from countboard.commands import store_argument


def add_store_args(p: argparse.ArgumentParser) -> None:
    """``--store`` (it must exist: these commands only read it) and ``--db``, the index file."""
    store_argument(p)
    p.add_argument("--db", default=None, type=Path,
                   help="DuckDB index file (default: $COUNTBOARD_INDEX_DB, else index.duckdb beside a local store, else "
                        "~/.cache/countboard/<host>-<hash>/index.duckdb for a remote one)")


def register(subparsers) -> None:
    p = subparsers.add_parser("index", help="build or update the DuckDB index of an MLflow store",
                              description="Index the store's runs, params, tags, metrics and artifacts into DuckDB. "
                                          "Only runs changed since the last call are read again.")
    add_store_args(p)
    p.add_argument("--full", action="store_true", help="rebuild the index from scratch")
    p.add_argument("--quick", action="store_true",
                   help="list only runs started or ended since the last index, running and deleted runs (misses "
                        "later edits of finished runs; --full or a plain run catches them)")
    p.add_argument("--history", choices=("stepped", "all"), default="stepped",
                   help="read the full history of stepped metrics only (default) or of every metric")
    p.set_defaults(func=run_index)


def store_paths(args) -> tuple[str, Path]:
    """The store (which must exist) and the index file."""
    from countboard.index.locate import default_db_path
    from countboard.tracking.store import open_store

    uri = open_store(args.store, create=False).uri
    return uri, (args.db.expanduser().resolve() if args.db else default_db_path(uri))


def run_index(args) -> int:
    from countboard.index.builder import build_index

    uri, db = store_paths(args)
    stats = build_index(uri, db, full=args.full, quick=args.quick, history=args.history)
    print(stats.summary())
    for w in stats.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0
