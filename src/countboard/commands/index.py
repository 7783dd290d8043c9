"""``countboard index`` (build or update the DuckDB index) and ``countboard leaderboard`` (serve it)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from countboard.commands import store_argument
from countboard.errors import ConfigError

UI_ENV = "COUNTBOARD_MLFLOW_UI"
DEFAULT_UI = "http://127.0.0.1:5000"


def _add_store_args(p: argparse.ArgumentParser) -> None:
    store_argument(p)
    p.add_argument("--db", default=None, type=Path,
                   help="DuckDB index file (default: $COUNTBOARD_INDEX_DB, else index.duckdb beside a local store, else "
                        "~/.cache/countboard/<host>-<hash>/index.duckdb for a remote one)")


def register(subparsers) -> None:
    p = subparsers.add_parser("index", help="build or update the DuckDB index of an MLflow store",
                              description="Index the store's runs, params, tags, metrics and artifacts into DuckDB. "
                                          "Only runs changed since the last call are read again.")
    _add_store_args(p)
    p.add_argument("--full", action="store_true", help="rebuild the index from scratch")
    p.add_argument("--quick", action="store_true",
                   help="list only runs started or ended since the last index, running and deleted runs (misses "
                        "later edits of finished runs; --full or a plain run catches them)")
    p.add_argument("--history", choices=("stepped", "all"), default="stepped",
                   help="read the full history of stepped metrics only (default) or of every metric")
    p.set_defaults(func=run_index)

    p = subparsers.add_parser("leaderboard", help="serve the Streamlit leaderboard over the index",
                              description="Start the leaderboard (Streamlit) reading the DuckDB index read-only.")
    _add_store_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--mlflow-ui", default=None,
                   help=f"base URL of the MLflow UI for run links (default: ${UI_ENV}, else the store itself when it is "
                        f"an http(s) server, else {DEFAULT_UI})")
    p.add_argument("--no-index", action="store_true", help="do not update the index before starting")
    p.set_defaults(func=run_leaderboard)


def _paths(args) -> tuple[str, Path]:
    """The store (which must exist: these commands only read it) and the index file."""
    from countboard.index.locate import default_db_path
    from countboard.tracking.store import open_store

    uri = open_store(args.store, create=False).uri
    return uri, (args.db.expanduser().resolve() if args.db else default_db_path(uri))


def run_index(args) -> int:
    from countboard.index.builder import build_index

    uri, db = _paths(args)
    stats = build_index(uri, db, full=args.full, quick=args.quick, history=args.history)
    print(stats.summary())
    for w in stats.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def leaderboard_command(db: Path, host: str, port: int) -> list[str]:
    """The ``streamlit run`` command line of the leaderboard."""
    from countboard.paths import leaderboard_dir

    return [sys.executable, "-m", "streamlit", "run", str(leaderboard_dir() / "app.py"),
            "--server.address", host, "--server.port", str(port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer", "--", "--db", str(db)]


def ui_base(store_uri: str) -> str:
    """The MLflow UI of a store: an http(s) store serves its own UI; a local one is shown by `countboard mlflow-ui`."""
    return store_uri.rstrip("/") if store_uri.startswith(("http://", "https://")) else DEFAULT_UI


def run_leaderboard(args) -> int:
    uri, db = _paths(args)
    if not args.no_index:
        run_index(argparse.Namespace(store=uri, db=db, full=False, quick=False, history="stepped"))
    elif not db.exists():
        raise ConfigError(f"no index at {db}; run `countboard index --store {uri} --db {db}` first "
                          "(or drop --no-index)")
    env = dict(os.environ)
    env["COUNTBOARD_INDEX_DB"] = str(db)
    env[UI_ENV] = args.mlflow_ui or env.get(UI_ENV) or ui_base(uri)
    print(f"leaderboard on http://{args.host}:{args.port} (index {db})", flush=True)
    cmd = leaderboard_command(db, args.host, args.port)
    os.execve(cmd[0], cmd, env)  # streamlit takes this process over: signals reach the server itself
    return 0
