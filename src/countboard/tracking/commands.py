"""``countboard mlflow-ui``: the MLflow UI on the store the sweeps write to."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from countboard.index.ui_address import UI_ENV, mlflow_ui_host_port
from countboard.tracking.store import local_store_uri


def default_store() -> Path:
    return Path(os.environ.get("COUNTBOARD_STORE", "mlruns"))


def _mlflow_ui(args: argparse.Namespace) -> int:
    uri = args.store if "://" in args.store else local_store_uri(args.store)
    if "://" not in args.store and not (Path(args.store) / "mlflow.db").exists():
        print(f"note: no store at {Path(args.store).resolve()} yet; run a sweep first (make demo)", file=sys.stderr)
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", args.host,
           "--port", str(args.port), "--workers", "1"]
    print(f"MLflow UI on http://{args.host}:{args.port} (store {uri}); Ctrl-C stops it", flush=True)
    return subprocess.call(cmd)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mlflow-ui", help="start the MLflow UI on the sweep store (127.0.0.1)")
    p.add_argument("--store", default=str(default_store()),
                   help="store directory (with mlflow.db) or tracking URI (default: ./mlruns or $COUNTBOARD_STORE)")
    host, port = mlflow_ui_host_port()  # the address the leaderboard links to: one setting for both
    p.add_argument("--host", default=host, help=f"bind address (default: {host}, from ${UI_ENV} when set)")
    p.add_argument("--port", type=int, default=port, help=f"port (default: {port}, from ${UI_ENV} when set)")
    p.set_defaults(func=_mlflow_ui)
