"""The local store's database taken from a job in the middle of its cell: another process holds SQLite's write lock
on ``mlflow.db`` after the cell's first checkpoint. The job waits for it (no line, no traceback), and the cell
finishes with each unit computed once."""

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
def test_a_store_locked_away_from_a_cell_for_a_while_is_waited_for(tmp_path):
    store, calls = tmp_path / "mlruns", tmp_path / "calls.log"
    args = [*CELL, f"task.calls_log={calls}"]
    hold = 20.0
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(store), str(hold)], stdout=subprocess.PIPE,
                              text=True, env=sweep_env(tmp_path))
    try:
        t0 = time.monotonic()
        first = run_sweep(args, tmp_path, store=store, check=False, timeout=600)
        took = time.monotonic() - t0
        assert locker.wait(timeout=120) == 0 and locker.stdout.read().strip() == "locked"
    finally:
        if locker.poll() is None:
            locker.kill()
            locker.wait()
    assert first.returncode == 0 and not first.stderr.strip(), first.stderr[-3000:]  # no line, no traceback
    assert took > hold
    print(f"the cell waited for a {hold:g} s lock and finished; the sweep took {took:.0f} s")
    runs = store_runs(store)
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 1 and cells["status"].iloc[0] == "FINISHED"
    assert sorted(calls.read_text().split()) == sorted(set(calls.read_text().split())) and \
        len(calls.read_text().split()) == 12  # each unit computed once: nothing was lost to the lock
