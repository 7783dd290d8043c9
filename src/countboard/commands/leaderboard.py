"""``countboard leaderboard``: update the index, then serve the Streamlit leaderboard over it (read-only).

The Streamlit server settings are passed on the command line (``STREAMLIT_SETTINGS``), so they hold whatever
``.streamlit/config.toml`` the working directory has; ``docs/leaderboard.md`` explains each one.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from countboard.errors import ConfigError
from countboard.index.ui_address import DEFAULT_UI, UI_ENV

# Why each is set (docs/leaderboard.md, "Server settings"):
STREAMLIT_SETTINGS = {
    "server.headless": "true",  # no browser opened by the server
    "server.enableXsrfProtection": "true",  # forms and uploads need Streamlit's XSRF cookie
    "server.enableCORS": "true",  # no cross-origin requests to the server
    "server.enableStaticServing": "false",  # nothing served from ./static
    "server.fileWatcherType": "none",  # the app is installed code; no reload on edits
    "server.runOnSave": "false",
    "browser.gatherUsageStats": "false",  # no telemetry requests
    "client.toolbarMode": "viewer",
    "client.showErrorDetails": "false",  # a reader sees a one-line error, not a traceback
    "global.developmentMode": "false",
}


def register(subparsers) -> None:
    from countboard.commands.index import add_store_args

    p = subparsers.add_parser("leaderboard", help="serve the Streamlit leaderboard over the index",
                              description="Start the leaderboard (Streamlit) reading the DuckDB index read-only.")
    add_store_args(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: loopback only; another address exposes the app to the network)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--mlflow-ui", default=None,
                   help=f"base URL of the MLflow UI for run links when no `countboard mlflow-ui` of this store is "
                        f"running (that one's address is followed; default: ${UI_ENV}, else the store itself when it "
                        f"is an http(s) server, else {DEFAULT_UI})")
    p.add_argument("--no-index", action="store_true", help="do not update the index before starting")
    p.set_defaults(func=run)


def leaderboard_command(db: Path, host: str, port: int) -> list[str]:
    """The ``streamlit run`` command line of the leaderboard, with the server settings above (through
    ``leaderboard_serve``, which imports the app's modules while the server starts)."""
    from countboard.paths import leaderboard_dir

    settings = [x for k, v in STREAMLIT_SETTINGS.items() for x in (f"--{k}", v)]
    return [sys.executable, "-m", "countboard.commands.leaderboard_serve", "run", str(leaderboard_dir() / "app.py"),
            "--server.address", host, "--server.port", str(port), *settings, "--", "--db", str(db)]


def run(args) -> int:
    from countboard.commands import index
    from countboard.tracking.address import INDEX_DB_ENV, STORE_ENV

    uri, db = index.store_paths(args)
    if not args.no_index:
        index.run(argparse.Namespace(store=uri, db=db, full=False, update="auto", history="stepped"))
    elif not db.exists():
        raise ConfigError(f"no index at {db}; run `countboard index --store {uri} --db {db}` first "
                          "(or drop --no-index)")
    env = dict(os.environ)
    env[INDEX_DB_ENV] = str(db)
    env[STORE_ENV] = uri
    if args.mlflow_ui:  # else the board links to the store's running `countboard mlflow-ui`, or the setting
        env[UI_ENV] = args.mlflow_ui
    print(f"leaderboard on http://{args.host}:{args.port} (index {db})", flush=True)
    cmd = leaderboard_command(db, args.host, args.port)
    os.execve(cmd[0], cmd, env)  # streamlit takes this process over: signals reach the server itself
    return 0
