"""One module per ``countboard`` subcommand, each with ``register(subparsers)``: parse, call the library, print.

Every command that reads or writes a store takes the same ``--store`` (``store_argument``) and turns it into a store
with ``countboard.tracking.store.open_store``.
"""

from __future__ import annotations

import argparse


def store_argument(parser: argparse.ArgumentParser, *, creates: bool = False) -> None:
    """Add ``--store``: a store directory, its ``mlflow.db`` or a tracking URI (one lookup order for every command)."""
    parser.add_argument(
        "--store", default=None,
        help="MLflow store: a store directory, its mlflow.db or a tracking URI (default: $COUNTBOARD_STORE, "
             "$MLFLOW_TRACKING_URI, else ./mlruns)" + ("; created when missing" if creates else "; it must exist"))
