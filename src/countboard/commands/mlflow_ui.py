"""``countboard mlflow-ui``: the MLflow UI on the store the sweeps write to, opening experiments on their runs table.

The server runs as a child in its own process group: SIGINT/SIGTERM to this command are passed on to the whole
group, and on Linux the child is also told to stop when this process dies (even by SIGKILL), so no server is
left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys

from countboard.commands import store_argument
from countboard.index.ui_address import UI_ENV, forget_served, mlflow_ui_host_port, record_served, served_url
from countboard.processes import die_with_parent


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux; elsewhere a no-op)."""
    die_with_parent(signal.SIGTERM)


def serve(cmd: list[str], grace_s: float = 10.0) -> int:
    """Run ``cmd`` as a child that stops with this process; returns its exit code."""
    child = subprocess.Popen(cmd, start_new_session=True, preexec_fn=_die_with_parent)  # noqa: PLW1509

    def forward(signum, frame):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                forward(signal.SIGINT, None)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if child.poll() is None:
            forward(signal.SIGTERM, None)
            try:
                child.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                forward(signal.SIGKILL, None)


def run(args: argparse.Namespace) -> int:
    from countboard.tracking.store import open_store

    tracker = open_store(args.store, create=False)
    if tracker.client_uri == tracker.uri:  # a read-only store is served as it is (immutable)
        tracker.mark_default_experiment()
    uri = tracker.uri
    backend = _backend(tracker)
    # `mlflow server`, its UI opening experiments on their runs table (countboard.tracking.mlflow_ui says why)
    cmd = [sys.executable, "-m", "countboard.tracking.mlflow_ui", "--backend-store-uri", backend, "--host", args.host,
           "--port", str(args.port), "--workers", "1"]
    url = served_url(args.host, args.port)
    print(f"MLflow UI on {url} (store {uri}); Ctrl-C stops it", flush=True)
    try:
        record_served(uri, url)  # the leaderboard of this store links here while this process lives
    except OSError as exc:  # a cache folder we cannot write: the board falls back to the setting
        print(f"warning: the address is not recorded for the leaderboard ({exc}); give it there with "
              f"--mlflow-ui {url}", file=sys.stderr, flush=True)
    try:
        return serve(cmd)
    finally:
        forget_served(uri)


def _backend(tracker) -> str:
    """The database the UI serves: the store's own; for a read-only store that was moved (its recorded artifact
    locations name another folder, and cannot be rewritten in place), a copy in the user cache whose locations
    point inside the store, so that the UI lists each run's artifacts from the store as it is now."""
    from countboard.tracking import address
    from countboard.tracking.relocate import relocated_copy

    where = address.parse(tracker.uri)
    if not (where.is_embedded and where.read_only):
        return tracker.client_uri
    copy = where.cache_dir() / "mlflow-ui.db"
    if not relocated_copy(where.db, copy):
        return tracker.client_uri
    print(f"read-only store {where.folder} was moved: the UI reads a copy of its database with the artifact "
          f"locations of this folder ({copy}; nothing changed in the UI is kept)", flush=True)
    return address.sqlite_uri(copy)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mlflow-ui", help="start the MLflow UI on the sweep store (127.0.0.1)")
    store_argument(p)
    host, port = mlflow_ui_host_port()  # the address the leaderboard links to: one setting for both
    p.add_argument("--host", default=host, help=f"bind address (default: {host}, from ${UI_ENV} when set)")
    p.add_argument("--port", type=int, default=port, help=f"port (default: {port}, from ${UI_ENV} when set)")
    p.set_defaults(func=run)
