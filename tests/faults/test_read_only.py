"""A read-only store is read in place: index (to the user cache or ``--db``), leaderboard, MLflow UI and doctor
work, and not a byte of it changes.

As root the store is a real read-only bind mount (``mount --bind`` then ``remount,ro``); as another user it is
made read-only with ``chmod -R a-w`` (which root would ignore).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import sweep_env
from tests.faults.conftest import countboard, snapshot


@pytest.fixture
def read_only(store_copy, tmp_path):
    """``store_copy`` seen read-only at ``tmp_path / "ro"``; yields that folder."""
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(store_copy)], check=True)
        yield store_copy
        subprocess.run(["chmod", "-R", "u+w", str(store_copy)], check=True)
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "--bind", str(store_copy), str(ro)], capture_output=True).returncode:
        pytest.skip("root without mount --bind here: cannot make a read-only store")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only here")
        yield ro
    finally:
        subprocess.run(["umount", str(ro)], check=False)


def test_index_and_doctor_read_a_read_only_store(read_only, tmp_path):
    with pytest.raises(OSError):
        (read_only / "probe").write_text("x")  # it really is read-only
    before = snapshot(read_only)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    elsewhere = countboard("index", "--store", str(read_only), "--db", str(tmp_path / "i.duckdb"), cwd=tmp_path, **env)
    assert elsewhere.returncode == 0, elsewhere.stderr
    cached = countboard("index", "--store", str(read_only), cwd=tmp_path, **env)
    assert cached.returncode == 0, cached.stderr
    assert list((tmp_path / "cache" / "countboard").glob("*/index.duckdb"))  # the user cache, not the store
    doctor = countboard("doctor", "--store", str(read_only), cwd=tmp_path, **env)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "half-created" not in doctor.stdout + doctor.stderr
    assert snapshot(read_only) == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _serving(args: list[str], store, tmp_path, health: str):
    """``countboard ARGS --store STORE`` serving on a free port until the block ends; yields its base URL."""
    env = sweep_env(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "countboard.cli", *args, "--store", str(store), "--port",
                             str(port)], cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{health}", timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.5)
        else:
            pytest.fail(f"{args[0]} did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.slow
def test_mlflow_ui_and_leaderboard_serve_a_read_only_store(read_only, tmp_path):
    before = snapshot(read_only)
    for args, path in ((["mlflow-ui"], "/health"), (["leaderboard"], "/_stcore/health")):
        with _serving(args, read_only, tmp_path, path) as url:
            if args == ["mlflow-ui"]:
                req = urllib.request.Request(f"{url}/api/2.0/mlflow/runs/search", method="POST",
                                             data=json.dumps({"experiment_ids": ["1"]}).encode(),
                                             headers={"Content-Type": "application/json"})
                assert json.load(urllib.request.urlopen(req, timeout=30))["runs"]
    assert snapshot(read_only) == before  # no lock file, no -shm, no index written into the store


@pytest.fixture
def restored(toy_store, store_copy):
    """``store_copy`` naming a folder that exists nowhere (a store moved from another machine, or from a folder
    since deleted): its recorded artifact locations cannot be read as they are."""
    con = sqlite3.connect(store_copy / "mlflow.db")
    try:
        with con:
            for table, col in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
                con.execute(f"UPDATE {table} SET {col} = replace({col}, ?, 'file:///gone/old-store')",
                            (toy_store.resolve().as_uri(),))
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all in mlflow.db, as a store that was closed
    finally:
        con.close()
    return store_copy


@pytest.mark.slow
def test_mlflow_ui_lists_the_artifacts_of_a_moved_read_only_store(restored, read_only, tmp_path):
    """The locations cannot be rewritten in a read-only database: the UI serves a rewritten copy from the user
    cache, and lists each run's files from the store's own folder."""
    from countboard.tracking.integrity import connect_ro

    con = connect_ro(read_only / "mlflow.db")
    try:
        run_id, recorded = con.execute(
            "SELECT r.run_uuid, r.artifact_uri FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE t.key = 'countboard.role' AND t.value = 'cell'").fetchone()
    finally:
        con.close()
    assert recorded.startswith("file:///gone/old-store/")
    expected = sorted(p.name for p in (read_only / "artifacts").glob(f"*/{run_id}/artifacts/*"))
    assert expected
    before = snapshot(read_only)
    with _serving(["mlflow-ui"], read_only, tmp_path, "/health") as url:
        listing = json.load(urllib.request.urlopen(
            f"{url}/ajax-api/2.0/mlflow/artifacts/list?run_id={run_id}", timeout=60))
    assert sorted(f["path"] for f in listing.get("files", [])) == expected
    assert snapshot(read_only) == before
    assert list((tmp_path / "cache" / "countboard").glob("*/mlflow-ui.db"))  # the copy lives in the user cache
