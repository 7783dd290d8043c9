"""kill -9 at the worst moment of each store operation: the next command works and nothing finished is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from countboard.index import build_index
from tests.conftest import run_sweep, sweep_env
from tests.faults.conftest import TOY, cell_runs
from tests.fixtures.synthetic_store import FamilySpec, make_store


@pytest.mark.slow
@pytest.mark.parametrize("point", ["log_params", "checkpoint_write"])
def test_kill_9_in_a_cell_then_rerun_finishes_it(tmp_path, point):
    calls = tmp_path / "calls.log"
    args = [*TOY, f"task.calls_log={calls}", "checkpoint_every=4"]
    first = run_sweep(args, tmp_path, check=False, env=sweep_env(tmp_path, COUNTBOARD_FAILPOINT=point))
    assert first.returncode == -9
    run_sweep(args, tmp_path)
    store = tmp_path / "mlruns"
    cells = cell_runs(store)
    assert len(cells) == 1 and cells["status"].iloc[0] == "FINISHED"
    assert cells["params.seed"].iloc[0] == "0"  # params logged even when the first attempt died before them
    art = next(store.glob(f"artifacts/*/{cells['run_id'].iloc[0]}/artifacts"))
    assert sorted(pd.read_parquet(art / "samples.parquet")["unit_id"]) == [f"u{i:03d}" for i in range(12)]
    recomputed = len(calls.read_text().split()) - 12
    assert recomputed <= 4  # at most the chunk whose part never reached the store


def test_kill_9_during_index_build_leaves_the_old_index_and_no_temp_file(tmp_path):
    small_store = make_store(tmp_path / "store", [FamilySpec("counters", {"mae": False}, ["a", "b"], ["d"])], seed=1)
    db = tmp_path / "index.duckdb"
    build_index(small_store.uri, db)
    before = db.read_bytes()
    code = f"from countboard.index import build_index; build_index({small_store.uri!r}, {str(db)!r}, full=True)"
    env = {**os.environ, "COUNTBOARD_FAILPOINT": "index_build"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert db.read_bytes() == before  # readers still see the whole old index
    assert list(tmp_path.glob("index.duckdb.tmp-*"))  # what the kill left behind...
    stats = build_index(small_store.uri, db)
    assert stats.runs == len(small_store.run_ids) + len(small_store.sweep_run_ids)
    assert not list(tmp_path.glob("index.duckdb.tmp-*"))  # ...is cleaned by the next build


SERVE = textwrap.dedent("""
    import sys
    from countboard.commands.mlflow_ui import serve
    sys.exit(serve([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(300)"]))
""")


def _child_pid(proc) -> int:
    return int(proc.stdout.readline())


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().split()[2] == "Z":
                return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_server_child_dies_with_its_parent(sig):
    proc = subprocess.Popen([sys.executable, "-c", SERVE], stdout=subprocess.PIPE, text=True)
    child = _child_pid(proc)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert _gone(child), f"server child {child} outlived its parent after {sig.name}"
