"""A store copied, moved or restored elsewhere keeps working, and nothing is written outside the store given."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest

from countboard.tracking.relocate import EXPERIMENT_DEPTH, resolve_run_uri, store_relative
from tests.conftest import run_sweep
from tests.faults.conftest import TOY, cell_runs, countboard, snapshot


def _locations(store: Path) -> tuple[list[str], list[str]]:
    with sqlite3.connect(store / "mlflow.db") as con:
        return ([r[0] for r in con.execute("SELECT artifact_location FROM experiments")],
                [r[0] for r in con.execute("SELECT artifact_uri FROM runs")])


def _point_elsewhere(store: Path, recorded: Path, old_root: str) -> None:
    """Make ``store`` (which names ``recorded`` as its folder) name ``old_root`` instead: what a store made on
    another machine, or by a version that kept absolute locations, and restored here looks like."""
    here = recorded.resolve().as_uri()
    con = sqlite3.connect(store / "mlflow.db")
    try:
        with con:
            for table, col in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
                con.execute(f"UPDATE {table} SET {col} = replace({col}, ?, ?)", (here, old_root))
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all in mlflow.db, as a store that was closed
    finally:
        con.close()


def test_store_relative_reads_the_layout_inside_the_current_folder(tmp_path):
    here = tmp_path / "copy"
    (here / "artifacts" / "exp" / "r1" / "artifacts").mkdir(parents=True)
    old = "file:///gone/store/artifacts/exp/r1/artifacts"
    assert store_relative(old, here) == (here / "artifacts/exp/r1/artifacts").as_uri()
    assert store_relative("/gone/store/artifacts/exp", here, EXPERIMENT_DEPTH) == str(here / "artifacts/exp")
    # inside the store, remote, or another layout: as recorded
    inside = (here / "artifacts/exp/r1/artifacts").as_uri()
    assert store_relative(inside, here) == inside
    assert store_relative("s3://b/artifacts/exp/r1/artifacts", here) == "s3://b/artifacts/exp/r1/artifacts"
    assert store_relative("file:///gone/store/mlartifacts/1/r1/artifacts", here).startswith("file:///gone")
    # kept outside on purpose: it exists there and has no counterpart here
    outside = tmp_path / "big" / "artifacts" / "exp" / "r2" / "artifacts"
    outside.mkdir(parents=True)
    assert store_relative(outside.as_uri(), here) == outside.as_uri()
    assert resolve_run_uri(old, f"sqlite:///{here / 'mlflow.db'}") == store_relative(old, here)
    assert resolve_run_uri(old, "http://127.0.0.1:5000") == old


@pytest.mark.slow
def test_sweep_into_a_copy_writes_only_under_the_copy(toy_store, store_copy):
    before = snapshot(toy_store)
    run_sweep([*TOY, "seed=7"], store_copy.parent, store=store_copy)
    assert snapshot(toy_store) == before  # not a byte of the original changed
    cells = cell_runs(store_copy)
    assert len(cells) == 2 and set(cells["status"]) == {"FINISHED"}
    for run_id in cells["run_id"]:
        assert next((store_copy / "artifacts").glob(f"*/{run_id}/artifacts/config.yaml"))
    experiments, runs = _locations(store_copy)
    root = store_copy.resolve().as_uri()
    assert all(loc.startswith(root) for loc in experiments + runs)  # rewritten to the copy's folder
    doctor = countboard("doctor", "--store", str(store_copy), cwd=store_copy.parent)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_a_store_restored_from_elsewhere_is_read_and_repaired(toy_store, store_copy, tmp_path):
    _point_elsewhere(store_copy, toy_store, "file:///nonexistent/old-machine/store")
    moved = tmp_path / "moved place"  # a rename, with a space
    store_copy.rename(moved)
    before = snapshot(moved)
    index = tmp_path / "elsewhere" / "index.duckdb"
    proc = countboard("index", "--store", str(moved), "--db", str(index), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(moved) == before  # a reader rewrites nothing
    con = duckdb.connect(str(index), read_only=True)
    try:
        uris = [r[0] for r in con.execute("SELECT artifact_uri FROM runs WHERE artifact_uri <> ''").fetchall()]
        files = con.execute("SELECT count(*) FROM artifacts WHERE path = 'samples.parquet'").fetchone()[0]
    finally:
        con.close()
    assert uris and all(u.startswith(moved.as_uri()) for u in uris)  # found where the store is now
    assert files == 1
    doctor = countboard("doctor", "--store", str(moved), cwd=tmp_path)
    assert doctor.returncode == 1 and "name another folder" in doctor.stdout
    assert "lost+found" not in doctor.stdout
    fixed = countboard("doctor", "--store", str(moved), "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    experiments, runs = _locations(moved)
    assert all(loc.startswith(moved.as_uri()) for loc in experiments + runs)
    assert next(moved.glob("artifacts/*/*/artifacts/samples.parquet"))  # nothing moved to lost+found
    assert not (moved / "lost+found").exists()
