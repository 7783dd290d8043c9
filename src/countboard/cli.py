"""``countboard`` command line: one subcommand per module listed in ``_SUBCOMMANDS``.

Each listed module defines ``register(subparsers)``, which adds its parser and sets ``func`` (called with the parsed
arguments, returning an exit code). Imports are deferred so that ``countboard --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from countboard.errors import CountboardError

_SUBCOMMANDS = [
    "countboard.tracking.commands",
    "countboard.demo",
    "countboard.index.commands",
    "countboard.commands.leaderboard",
    "countboard.data.geckonum_import",
    "countboard.models.shapecount_train",
    "countboard.quantify.commands",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="countboard", description="Countboard: index, browse and compare counting-centred evaluations.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _SUBCOMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    try:
        return int(args.func(args) or 0)
    except CountboardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
