"""``countboard server``: an MLflow tracking server for a team, on PostgreSQL, with proxied artifacts.

Sweeps, the index and the leaderboard talk to it by its http URL only (``tracking=server tracking.uri=…``,
``countboard index --store http://…``): the database credentials and the artifact store stay on the server.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from urllib.parse import urlparse

from countboard.errors import ConfigError
from countboard.tracking.reach import redact

#: Backend schemes and the Python module each needs (SQLAlchemy 2.1 reads ``postgresql://`` with psycopg 3).
_DRIVERS = {"postgresql": "psycopg", "postgresql+psycopg": "psycopg", "postgresql+psycopg2": "psycopg2",
            "mysql": "pymysql", "mysql+pymysql": "pymysql", "sqlite": "sqlite3"}


def check_backend(uri: str) -> None:
    """Refuse a backend store URI whose driver is missing, or that is not a database URI, in one line each."""
    scheme = urlparse(uri).scheme
    if scheme not in _DRIVERS:
        raise ConfigError(f"--backend-store-uri {uri!r}: use a database URI such as "
                          "postgresql://USER:PASSWORD@HOST:5432/DB (or sqlite:///path/mlflow.db to try it alone)")
    module = _DRIVERS[scheme]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"--backend-store-uri {scheme}://… needs the Python module {module!r}: "
                          "pip install 'countboard[server]'")


def artifacts_destination(dest: str) -> str:
    """A local folder (created, made absolute) or an object-store URI (``s3://…``, ``gs://…``) as given."""
    if "://" in dest:
        return dest
    path = Path(dest).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def server_command(args: argparse.Namespace) -> list[str]:
    """The ``mlflow server`` command line for ``args``."""
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", args.backend_store_uri,
           "--serve-artifacts", "--artifacts-destination", artifacts_destination(args.artifacts_destination),
           "--host", args.host, "--port", str(args.port), "--workers", str(args.workers)]
    if args.allowed_hosts:
        cmd += ["--allowed-hosts", args.allowed_hosts]
    return cmd


def run(args: argparse.Namespace) -> int:
    check_backend(args.backend_store_uri)
    cmd = server_command(args)
    where = f"http://{args.host}:{args.port}"
    print(f"MLflow server on {where} (runs in {redact(args.backend_store_uri)}, artifacts in "
          f"{cmd[cmd.index('--artifacts-destination') + 1]}); sweeps: tracking=server tracking.uri={where}",
          flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print("note: the server has no authentication; bind it to a private network only", file=sys.stderr)
    if args.dry_run:
        print(" ".join(cmd).replace(args.backend_store_uri, redact(args.backend_store_uri)))
        return 0
    os.execv(cmd[0], cmd)  # the server takes this process over: `kill PID` reaches it
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("server", help="start an MLflow server for a team (PostgreSQL + proxied artifacts)",
                       description="Start `mlflow server` on a database with proxied artifacts: clients need only "
                                   "its URL; artifacts are uploaded and downloaded through it.")
    p.add_argument("--backend-store-uri", required=True,
                   help="database of runs, e.g. postgresql://mlflow:PASSWORD@127.0.0.1:5432/mlflow")
    p.add_argument("--artifacts-destination", required=True,
                   help="where the server keeps artifacts: a folder (on a disk the server sees) or s3://bucket/prefix")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: loopback only; 0.0.0.0 or a private address for a team)")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--workers", type=int, default=2, help="server worker processes (default: 2)")
    p.add_argument("--allowed-hosts", default=None,
                   help="comma-separated Host headers the server accepts when bound beyond loopback, e.g. "
                        "'mlflow.lab.internal:5000,10.0.0.5:5000'")
    p.add_argument("--dry-run", action="store_true", help="print the mlflow command instead of running it")
    p.set_defaults(func=run)
