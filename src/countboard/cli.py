"""``countboard`` command line: one subcommand per module listed in ``_SUBCOMMANDS``.

Each listed module defines ``register(subparsers)``, which adds its parser and sets ``func`` to the module's
``run(args)`` (called with the parsed arguments, returning an exit code). Imports are deferred so that
``countboard --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from countboard import quiet
from countboard.errors import DEBUG_ENV, debug_enabled, user_message

_SUBCOMMANDS = [
    "countboard.commands.mlflow_ui",
    "countboard.commands.demo",
    "countboard.commands.index",
    "countboard.commands.import_geckonum",
    "countboard.commands.train_counter",
    "countboard.commands.leaderboard",
    "countboard.commands.compare",
    "countboard.commands.import_praco",
    "countboard.commands.export_praco",
    "countboard.commands.doctor",
    "countboard.commands.server",
    "countboard.commands.publish",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="countboard", description="Countboard: index, browse and compare counting-centred evaluations.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true",
                        help=f"show the traceback of an error (also ${DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _SUBCOMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def _store_write_error(exc: BaseException, args) -> str | None:
    """A write the file system refused, named against the command's store (SQLite names no file)."""
    from countboard.errors import write_error

    if not hasattr(args, "store"):
        return None
    from countboard.tracking import address

    try:
        folder = address.resolve(args.store).folder
    except Exception:  # the address itself is what failed: said by the error's own line
        return None
    return write_error(exc, folder)


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand, the server of its ``--store`` probed first (``tracking.reach.reach``). A user-fixable
    error (ours, or an OS, Arrow or zip error) prints one line and exits 2; ``--debug`` or ``COUNTBOARD_DEBUG=1``
    shows its traceback instead."""
    args = build_parser().parse_args(argv)
    if args.debug:
        os.environ[DEBUG_ENV] = "1"
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    quiet.silence()
    try:
        if hasattr(args, "store"):  # a store server that does not answer is named before the command's imports
            from countboard.tracking import address
            from countboard.tracking.reach import reach

            reach(address.resolve(args.store).uri)
        return int(args.func(args) or 0)
    except Exception as exc:
        message = _store_write_error(exc, args) or user_message(exc)
        if message is None or debug_enabled():
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
