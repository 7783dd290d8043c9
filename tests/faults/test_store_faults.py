"""The embedded store under kills and races: creation is atomic, half-created stores are replaced."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from countboard.errors import TrackingStoreError
from countboard.tracking.local_store import ensure_local_store
from countboard.tracking.store import open_store

CREATE = "import sys; from countboard.tracking.local_store import ensure_local_store; ensure_local_store(sys.argv[1])"


def _works(store_dir) -> None:
    tracker = open_store(str(store_dir), create=False)
    tracker.check()
    exp = tracker.experiment_id("e")
    tracker.create_run(exp, "r", {"config_hash": "h"})


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.3])  # benchmarks/faults.py tries random moments
def test_kill_9_during_store_creation_leaves_no_broken_store(tmp_path, delay):
    store = tmp_path / "s"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # no store template: a real schema build
    proc = subprocess.Popen([sys.executable, "-c", CREATE, str(store)], env=env)
    deadline = time.monotonic() + 120
    while not list(store.glob("mlflow.db*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # the schema build has started
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list(store.glob("mlflow.db.creating-*"))  # the kill did land inside the schema build
    db = store / "mlflow.db"
    if db.exists():  # either absent or complete, never half-made
        with sqlite3.connect(db) as con:
            assert con.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1
    ensure_local_store(store)
    _works(store)
    assert not list(store.glob("mlflow.db.creating-*"))


def test_half_created_store_is_moved_aside_and_recreated(tmp_path, caplog):
    store = tmp_path / "s"
    store.mkdir()
    with sqlite3.connect(store / "mlflow.db") as con:  # what a kill during MLflow's own migration leaves
        con.execute("CREATE TABLE experiments (experiment_id INTEGER)")
    ensure_local_store(store)
    _works(store)
    aside = list(store.glob("mlflow.db.broken-*"))
    assert len(aside) == 1
    assert "half-created" in caplog.text and str(store / "mlflow.db") in caplog.text and aside[0].name in caplog.text


@pytest.mark.slow
def test_concurrent_creation_of_one_store(tmp_path):
    store = tmp_path / "s"
    procs = [subprocess.Popen([sys.executable, "-c", CREATE, str(store)], stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    _works(store)
    assert not list(store.glob("mlflow.db.broken-*"))


def test_read_only_commands_refuse_a_missing_store(tmp_path):
    with pytest.raises(TrackingStoreError, match="no MLflow store at"):
        open_store(str(tmp_path / "typo"), create=False)
    assert not (tmp_path / "typo").exists()
