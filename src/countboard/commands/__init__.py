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


def experiment_argument(parser: argparse.ArgumentParser, what: str = "MLflow experiment") -> None:
    """Add ``--experiment``: an experiment name or a pattern with ``{family}`` (default: one per family)."""
    from countboard.tracking.experiments import DEFAULT_PATTERN

    parser.add_argument(
        "--experiment", default=DEFAULT_PATTERN,
        help=f"{what}: a name, or a pattern whose {{family}} is the run's family group (default: "
             f"{DEFAULT_PATTERN}; runs of the store's older single experiment "
             "countboard are read too)")
