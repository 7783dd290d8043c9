"""Helpers for fault tests: sweeps in real subprocesses, stopped with real signals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
