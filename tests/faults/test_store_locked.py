"""The local store's database taken from a job in the middle of its cell: another process holds SQLite's write lock
on ``mlflow.db`` for longer than the job retries. The cell says so in one line naming the store and what to do, no
traceback; its stored checkpoints are kept, and once the lock is gone the rerun resumes from them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import run_sweep, store_runs, sweep_env
from tests.faults.conftest import TOY

CELL = [*TOY, "checkpoint_every=4", "task.delay_s=0.4"]

#: Waits for the cell's first checkpoint in the store, then holds the database's write lock for ``argv[2]`` s.
LOCKER = textwrap.dedent("""
    import sqlite3, sys, time
    from pathlib import Path
    store, hold = Path(sys.argv[1]), float(sys.argv[2])
    deadline = time.monotonic() + 300
    while not any(p.parent.name == "checkpoints" and p.is_file() for p in store.rglob("*")):
        assert time.monotonic() < deadline, "no checkpoint was stored"
        time.sleep(0.05)
    con = sqlite3.connect(store / "mlflow.db", timeout=60, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    time.sleep(hold)
    con.execute("COMMIT")
    con.close()
""")


@pytest.mark.slow
def test_a_store_locked_away_from_a_cell_is_one_line_and_the_rerun_resumes(tmp_path):
    store, calls = tmp_path / "mlruns", tmp_path / "calls.log"
    args = [*CELL, f"task.calls_log={calls}"]
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(store), "240"], stdout=subprocess.PIPE, text=True,
                              env=sweep_env(tmp_path))
    try:
        t0 = time.monotonic()
        first = run_sweep(args, tmp_path, store=store, check=False, timeout=600)
        waited = time.monotonic() - t0
        assert locker.poll() is None, "the lock was released before the job gave up"
    finally:
        locker.kill()
        locker.wait()
    lines = first.stderr.strip().splitlines()
    assert first.returncode == 1 and "Traceback" not in first.stderr, first.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), first.stderr
    assert f"the local store {store / 'mlflow.db'}" in lines[0] and "locked" in lines[0], lines[0]
    assert "then run the same command again" in lines[0] and "checkpointed in the store" in lines[0], lines[0]
    print(f"the job gave up after {waited:.0f} s: {lines[0]}")
    computed_first = calls.read_text().split()
    rerun = run_sweep(args, tmp_path, store=store)
    assert rerun.returncode == 0
    runs = store_runs(store)
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 1 and cells["status"].iloc[0] == "FINISHED"
    computed = calls.read_text().split()
    assert len(computed_first) >= 4 and len(computed) - 12 <= 4  # the stored checkpoints were not computed again
