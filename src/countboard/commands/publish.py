"""``countboard publish OUT/``: the leaderboard as a static site (``countboard.publish``), optionally compared with
an earlier publication."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    from countboard.commands.index import add_store_args

    p = subparsers.add_parser(
        "publish", help="write the leaderboard as a static site (HTML, CSV, JSON) from the index",
        description="Write a self-contained static site from the DuckDB index: an overview, one page per family and "
                    "benchmark, one per entry with its provenance, every table as CSV and JSON. It opens from "
                    "file:// and from any static host.")
    add_store_args(p)
    p.add_argument("out", type=Path, help="folder to write (new, empty, or an earlier publication, replaced whole)")
    p.add_argument("--family", action="append", default=[], metavar="KEY",
                   help="publish this family only (repeat for several; default: every family with a page)")
    p.add_argument("--dataset", action="append", default=[], metavar="NAME",
                   help="publish this dataset only (repeat for several; default: all)")
    p.add_argument("--title", default="Countboard leaderboard", help="the site's title")
    p.add_argument("--base-url", default="", help="the address the site will be served from (canonical links)")
    p.add_argument("--compare", type=Path, default=None, metavar="OLD",
                   help="an earlier publication: print what changed (new entries, moved ranks, changed values)")
    p.add_argument("--compare-only", action="store_true",
                   help="with --compare: compare OLD with OUT as they are, publish nothing")
    p.add_argument("--no-index", action="store_true", help="publish the index as it is, without updating it")
    p.set_defaults(func=run)


def run(args) -> int:
    from countboard.errors import ConfigError
    from countboard.publish import Options, build_site, compare_sites

    if args.compare_only:
        if args.compare is None:
            raise ConfigError("--compare-only needs --compare OLD")
        print("\n".join(compare_sites(args.compare, args.out).lines()))
        return 0
    from countboard.commands import index

    uri, db = index.store_paths(args)
    if not args.no_index:
        index.run(argparse.Namespace(store=uri, db=db, full=False, update="auto", history="stepped"))
    elif not db.exists():
        raise ConfigError(f"no index at {db}; run `countboard index --store {uri} --db {db}` first (or drop "
                          "--no-index)")
    from countboard.tracking.address import parse

    options = Options(families=tuple(args.family), datasets=tuple(args.dataset), title=args.title,
                      base_url=args.base_url)
    report = build_site(db, args.out, options, store_dir=parse(uri).folder)
    print(report.summary())
    if args.compare is not None:
        print("\n".join(compare_sites(args.compare, args.out).lines()))
    return 0
