"""A file system that refuses writes (full, read-only) ends a sweep with one ``error:`` line per job naming it, keeps
what was finished, and a rerun after the space is freed finishes every unit. Real sweeps on a small tmpfs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import sweep_env
from tests.faults.conftest import TOY, cell_runs

pytestmark = pytest.mark.slow


@pytest.fixture
def tmpfs(tmp_path):
    """A mounted 8 MB tmpfs (root only); unmounted after the test."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path, leave_bytes: int) -> Path:
    filler = mnt / "filler"
    free = shutil.disk_usage(mnt).free
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave_bytes))
    return filler


def sweep(tmp_path: Path, store: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *TOY, *args, "progress=false",
           f"tracking.store_dir={store}"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=sweep_env(tmp_path, **env),
                          timeout=300)


def _store(mnt: Path) -> Path:
    from countboard.tracking.local_store import ensure_local_store

    ensure_local_store(mnt / "store")
    return mnt / "store"


GRID = ["-m", "seed=0,1,2", "task.delay_s=0.01"]


def test_a_full_store_ends_each_job_in_one_line_and_a_rerun_finishes(tmpfs, tmp_path):
    store = _store(tmpfs)
    filler = fill(tmpfs, 48 * 1024)
    full = sweep(tmp_path, store, *GRID)
    lines = full.stderr.splitlines()
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == len(lines) == 3, full.stderr[-3000:]  # one line per job, nothing else
    for n, line in enumerate(errors):
        assert line.startswith(f"error: job #{n} (")
        assert f"the file system of the store {store} (mounted at {tmpfs}," in line and ") is full: free space" in line
    filler.unlink()
    again = sweep(tmp_path, store, *GRID)
    assert again.returncode == 0, again.stderr[-3000:]
    cells = cell_runs(store)
    assert len(cells) == 3 and set(cells["status"]) == {"FINISHED"}
    assert set(cells["metrics.n_samples"]) == {12.0}


def test_full_temporary_files_are_named_not_the_store(tmpfs, tmp_path):
    store = tmp_path / "store"
    fill(tmpfs, 4096)
    full = sweep(tmp_path, store, "task.delay_s=0.01", TMPDIR=str(tmpfs))
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
    assert full.stderr.startswith(f"error: the file system of temporary files {tmpfs} (mounted at {tmpfs}"), \
        full.stderr
    assert len(full.stderr.splitlines()) == 1 and "set TMPDIR to a folder that has room" in full.stderr
    again = sweep(tmp_path, store, "task.delay_s=0.01")
    assert again.returncode == 0 and set(cell_runs(store)["status"]) == {"FINISHED"}, again.stderr[-3000:]


def test_a_read_only_store_is_named(tmpfs, tmp_path):
    store = _store(tmpfs)
    assert sweep(tmp_path, store, "task.delay_s=0.01").returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    try:
        ro = sweep(tmp_path, store, "seed=3", "task.delay_s=0.01")
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    assert ro.returncode == 1 and "Traceback" not in ro.stderr, ro.stderr[-3000:]
    assert len(ro.stderr.splitlines()) == 1 and ro.stderr.startswith("error: ")
    assert f"{store}" in ro.stderr and "is read-only: mount it writable" in ro.stderr, ro.stderr
    assert os.access(store / "mlflow.db", os.R_OK)
