"""Helpers for fault tests: sweeps in real subprocesses, stopped with real signals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, sweep_env

TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config"]


def start_sweep(args: list[str], tmp_path: Path, log_name: str, server: str | None = None,
                **env: str) -> subprocess.Popen:
    """``countboard-sweep`` in the background (on the local store, or on ``server``), output in ``tmp_path/<log_name>``."""
    store = ["tracking=server", f"tracking.uri={server}"] if server else [f"tracking.store_dir={tmp_path / 'mlruns'}"]
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *TOY, *args, "progress=false", *store]
    out = open(tmp_path / log_name, "w")  # noqa: SIM115 (closed by the child's exit)
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=sweep_env(tmp_path, **env))


def cell_runs(store: Path):
    from tests.conftest import store_runs

    runs = store_runs(store)
    return runs[runs["tags.countboard.role"] == "cell"]


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on a free loopback port (its own SQLite file); yields its URL."""
    import os
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start")
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=20)
