"""No process outlives its sweep: a ``kill -9`` of a real sweep in the middle of a cell (as a user, a scheduler or
the kernel's OOM killer does) leaves none of its loader workers or launcher processes behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import sweep_env

SHAPES = ["model=oracle", "task=praco_negative", "dataset=synthetic_shapes", "dataset.image_size=[96,96]",
          "dataset.size_range=[5,8]", "dataset.count_range=[1,10]", "dataset.n_classes=4",
          "dataset.images_per_class={train:0,val:0,test:400}", "dataset.multi_class_images=0",
          "checkpoint_every=8", "batch_size=1", "num_workers=2", "progress=false"]


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process, None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else (int(fields[1]), fields[19])


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``: pid -> start time (a pid reused later is not the same process)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))):
            parents[int(entry)] = st
    found, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        for child, (ppid, start) in parents.items():
            if ppid == pid and child not in found:
                found[child] = start
                frontier.append(child)
    return found


def _alive(procs: dict[int, str]) -> dict[int, str]:
    return {pid: start for pid, start in procs.items() if (st := _stat(pid)) and st[1] == start}


def _kill_mid_cell(args: list[str], tmp_path: Path, want: int, timeout: float = 240) -> dict[int, str]:
    """Start a sweep, wait until ``want`` processes run below it, ``kill -9`` it; returns those processes."""
    root = tmp_path / "shapes"
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *args, f"dataset.root={root}",
           f"tracking.store_dir={tmp_path / 'store'}"]
    log = open(tmp_path / "sweep.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=sweep_env(tmp_path))
    deadline, below = time.monotonic() + timeout, {}
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            below = descendants(proc.pid)
            if len(below) >= want:
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(below) >= want, \
            f"{len(below)} processes below the sweep: {(tmp_path / 'sweep.log').read_text()[-3000:]}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return below


def _none_left(below: dict[int, str], within: float = 10.0) -> dict[int, str]:
    deadline = time.monotonic() + within
    while _alive(below) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive(below)
    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.slow
def test_kill_9_of_a_sweep_ends_its_loader_workers(tmp_path):
    below = _kill_mid_cell(SHAPES, tmp_path, want=2)
    assert not _none_left(below), "loader workers outlived their sweep"


@pytest.mark.slow
def test_kill_9_of_a_joblib_multirun_ends_its_job_processes_and_their_workers(tmp_path):
    args = ["-m", *SHAPES, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1"]
    below = _kill_mid_cell(args, tmp_path, want=6)  # 2 job processes with 2 loader workers each, and more
    assert not _none_left(below), "job processes or loader workers outlived their sweep"
