"""``countboard index``: build or update the DuckDB index of a store (``countboard leaderboard`` serves it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from countboard.commands import store_argument
from countboard.index.updates import SCAN_EVERY_S


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
    how = p.add_mutually_exclusive_group()
    how.add_argument("--scan", dest="update", action="store_const", const="scan",
                     help="compare every run of the store now: also sees later edits of runs that had already ended "
                          "(a tag set in the MLflow UI, a metric logged into an ended run); and checks every ended run's "
                          "files against its artifact manifest, as doctor does")
    how.add_argument("--quick", dest="update", action="store_const", const="quick",
                     help="read only runs started or ended since the last index, running and deleted runs")
    p.set_defaults(update="auto")
    p.add_argument("--scan-every", type=float, default=SCAN_EVERY_S / 60, metavar="MINUTES",
                   help="by default an update is quick unless the last scan is older than this (default: "
                        "%(default)g minutes), so later edits of ended runs show within that time")
    p.add_argument("--list-artifacts", action="store_true",
                   help="list the artifacts of every run read instead of taking them from the runs' manifests (with "
                        "--full: brings in files that other tools logged into runs after they ended)")
    p.add_argument("--history", choices=("stepped", "all"), default="stepped",
                   help="read the full history of stepped metrics only (default) or of every metric")
    p.set_defaults(func=run)


def store_paths(args) -> tuple[str, Path]:
    """The store (which must exist) and the index file."""
    from countboard.tracking.address import resolve
    from countboard.tracking.store import open_address

    where = resolve(args.store)
    uri = open_address(where, create=False).uri
    return uri, (args.db.expanduser().resolve() if args.db else where.index_path())


def run(args) -> int:
    from countboard.index.builder import build_index

    uri, db = store_paths(args)
    stats = build_index(uri, db, full=args.full, update=getattr(args, "update", "auto"),
                        scan_every_s=60 * getattr(args, "scan_every", SCAN_EVERY_S / 60), history=args.history,
                        list_artifacts=getattr(args, "list_artifacts", False),
                        audit=getattr(args, "update", "auto") == "scan")
    print(stats.summary())
    for w in stats.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0
