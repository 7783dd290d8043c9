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


def countboard(*args: str, cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """``countboard ARGS`` in a subprocess (the command a user types), output as text."""
    return subprocess.run([sys.executable, "-m", "countboard.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=sweep_env(cwd, **env))


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file under ``folder``: what a command must not change.

    SQLite's ``-shm`` file (the shared-memory index of a WAL database, which every reader updates) is left out.
    """
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.endswith("-shm")}


@pytest.fixture(scope="session")
def toy_store(tmp_path_factory) -> Path:
    """A store with one finished toy cell, made once per session by a real sweep; copy it, never change it."""
    from tests.conftest import run_sweep

    tmp = tmp_path_factory.mktemp("toy-store")
    run_sweep(TOY, tmp, store=tmp / "store")
    return tmp / "store"


@pytest.fixture
def store_copy(toy_store, tmp_path) -> Path:
    """A private copy of ``toy_store`` (made with ``cp -r``: it still names the original folder inside)."""
    dest = tmp_path / "store"
    subprocess.run(["cp", "-r", str(toy_store), str(dest)], check=True)
    return dest
