"""A repair never decides for a live owner: ``doctor --fix`` run over and over beside a real sweep leaves its cells
and its parent run to it (each named ``[live] … left as it is``), and repairs what a ``kill -9`` of a sweep left."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from countboard.tracking.lease import Owner
from tests.conftest import store_runs, sweep_env
from tests.faults.conftest import countboard

#: Four small cells, run one after the other by Hydra's basic launcher: the parent run has no RUNNING child while
#: the sweep goes from one cell to the next.
CELLS = ["-m", "model=oracle", "task=praco_negative", "dataset=synthetic_shapes", "dataset.image_size=[64,64]",
         "dataset.size_range=[5,8]", "dataset.count_range=[1,6]", "dataset.n_classes=3",
         "dataset.images_per_class={train:0,val:0,test:60}", "dataset.multi_class_images=0", "checkpoint_every=4",
         "batch_size=2", "num_workers=0", "progress=false", "seed=0,1,2,3"]


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *CELLS, *extra, f"dataset.root={tmp_path / 'shapes'}",
           f"tracking.store_dir={tmp_path / 'store'}"]
    log = open(tmp_path / "sweep.log", "w")  # noqa: SIM115 (closed by the child's exit)
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=sweep_env(tmp_path))


def _runs(store: Path):
    runs = store_runs(store)
    if "tags.countboard.role" not in runs.columns:  # no run yet
        return runs.iloc[0:0], runs.iloc[0:0]
    return runs[runs["tags.countboard.role"] == "cell"], runs[runs["tags.countboard.role"] == "sweep"]


#: ``countboard doctor --fix`` over and over in one process (the imports paid once: a pass every second or so)
#: until the stop file exists; each pass's output after a ``--- pass N`` line.
DOCTOR_LOOP = """
import sys, pathlib
from countboard.cli import main
store, stop, n = sys.argv[1], pathlib.Path(sys.argv[2]), 0
while not stop.exists():
    print(f"--- pass {n}", flush=True)
    main(["doctor", "--store", store, "--fix"])
    sys.stdout.flush()
    n += 1
"""


@pytest.mark.slow
def test_doctor_fix_in_a_loop_beside_a_sweep_leaves_it_to_finish(tmp_path):
    store, stop = tmp_path / "store", tmp_path / "stop"
    sweep = _start(tmp_path)
    doctor = None
    try:
        while sweep.poll() is None and not (store / "mlflow.db").is_file():
            time.sleep(0.1)
        with open(tmp_path / "doctor.log", "w") as out:
            doctor = subprocess.Popen([sys.executable, "-c", DOCTOR_LOOP, str(store), str(stop)], stdout=out,
                                      stderr=subprocess.STDOUT, cwd=tmp_path, env=sweep_env(tmp_path))
        assert sweep.wait(timeout=900) == 0, (tmp_path / "sweep.log").read_text()[-4000:]
        stop.touch()
        assert doctor.wait(timeout=300) == 0
    finally:
        for proc in (sweep, doctor):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    said = (tmp_path / "doctor.log").read_text()
    passes = said.count("--- pass ")
    assert passes >= 3, f"doctor ran only {passes} times beside the sweep: {said[-2000:]}"
    for repair in ("[orphan]", "[parent]", "[lease]", "belongs to no run", "Traceback", "error:"):
        assert repair not in said, said[-4000:]  # no repair ever touched what the live sweep owned
    cells, parents = _runs(store)
    assert len(cells) == 4 and set(cells["status"]) == {"FINISHED"}, cells[["status", "tags.error"]]
    assert len(parents) == 1 and parents["status"].iloc[0] == "FINISHED"
    assert parents["tags.n_children"].iloc[0] == "4" and parents["tags.n_failed_children"].iloc[0] == "0"
    if "tags.error" in parents.columns:
        assert not parents["tags.error"].fillna("").iloc[0]
    for line in said.splitlines():  # every run doctor left, it left to a live process, in one line
        if line.startswith("[live]"):
            assert line.endswith(": left as it is") and f"on host {socket.gethostname()}" in line, line
    left = [line for line in said.splitlines() if line.startswith("[live] sweep run")]
    print(f"{passes} doctor --fix passes beside the sweep; {len(left)} left its parent to it")
    clean = countboard("doctor", "--store", str(store), cwd=tmp_path)
    assert "store is consistent" in clean.stdout or "[index]" in clean.stdout, clean.stdout + clean.stderr
    assert "[live]" not in clean.stdout  # the sweep's owner record names a process that has ended


def _wait_for_running_cell(sweep: subprocess.Popen, tmp_path: Path, timeout: float = 300) -> None:
    """Until the sweep's second cell has a checkpoint (its first is FINISHED, its parent and second are RUNNING)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and sweep.poll() is None:
        if (tmp_path / "store" / "mlflow.db").is_file():
            cells, _ = _runs(tmp_path / "store")
            if len(cells) and (cells["status"] == "FINISHED").sum() >= 1 and (cells["status"] == "RUNNING").any():
                return
        time.sleep(0.3)
    raise AssertionError(f"no second cell ran: {(tmp_path / 'sweep.log').read_text()[-3000:]}")


@pytest.mark.slow
def test_doctor_fix_repairs_what_a_killed_sweep_left(tmp_path):
    store = tmp_path / "store"
    sweep = _start(tmp_path)
    try:
        _wait_for_running_cell(sweep, tmp_path)
        assert sweep.poll() is None
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    listed = countboard("doctor", "--store", str(store), cwd=tmp_path)
    assert listed.returncode == 1, listed.stdout + listed.stderr
    assert "[orphan] cell run" in listed.stdout and "[lease]" in listed.stdout, listed.stdout
    assert f"its process (pid {sweep.pid} on this host" in listed.stdout, listed.stdout  # the parent's owner
    assert "[live]" not in listed.stdout
    fixed = countboard("doctor", "--store", str(store), "--fix", cwd=tmp_path)
    assert fixed.returncode == 0 and "0 left" in fixed.stdout, fixed.stdout + fixed.stderr
    cells, parents = _runs(store)
    assert "RUNNING" not in set(cells["status"]) and "KILLED" in set(cells["status"]), cells["status"]
    assert parents["status"].iloc[0] == "FAILED"  # with a killed child
    again = countboard("doctor", "--store", str(store), cwd=tmp_path)
    assert "[orphan]" not in again.stdout and "[parent]" not in again.stdout, again.stdout
    rerun = _start(tmp_path)  # the same sweep resumes its killed cell and closes its parent itself
    assert rerun.wait(timeout=600) == 0, (tmp_path / "sweep.log").read_text()[-4000:]
    cells, parents = _runs(store)
    assert len(cells) == 4 and set(cells["status"]) == {"FINISHED"}
    assert parents["status"].iloc[0] == "FINISHED"


def test_owner_rule_this_host_by_process_other_hosts_by_heartbeat():
    import os

    here = socket.gethostname()
    me = Owner.from_run_tags({"owner": f"{here}:{os.getpid()}", "owner.heartbeat": "1.0"})
    assert me is not None and me.live(ttl_s=60)  # a live process here, however late its heartbeat
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = Owner.from_run_tags({"owner": f"{here}:{dead.stdout.strip()}", "owner.heartbeat": f"{time.time()}"})
    assert not gone.live(ttl_s=60) and "is gone" in gone.why_gone(60)
    now = 1000.0
    far = Owner("elsewhere", 7, "", heartbeat=now - 10)
    assert far.live(ttl_s=60, now=now) and not far.live(ttl_s=5, now=now)
    assert far.describe(now=now) == "pid 7 on host elsewhere, heartbeat 10 s ago"
    assert "more than the 5 s --lease-ttl-s" in far.why_gone(5, now=now)
    assert not Owner("elsewhere", 7, "", None).live(ttl_s=60)  # without a heartbeat it cannot be proven live
    assert Owner.from_run_tags({}) is None
