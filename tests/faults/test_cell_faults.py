"""Cells under damaged checkpoints, failing units and unsafe names (real sweeps in subprocesses)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import run_sweep, sweep_env
from tests.faults.conftest import TOY, cell_runs

ALL = ",".join(f"u{i:03d}" for i in range(12))


def _artifacts(store, run_id):
    return next(store.glob(f"artifacts/*/{run_id}/artifacts"))


@pytest.mark.slow
def test_a_truncated_part_is_set_aside_and_its_units_recomputed(tmp_path):
    calls = tmp_path / "calls.log"
    args = [*TOY, f"task.calls_log={calls}", "task.kill_at=u008", "checkpoint_every=4"]
    assert run_sweep(args, tmp_path, check=False).returncode == -9
    store = tmp_path / "mlruns"
    run_id = cell_runs(store)["run_id"].iloc[0]
    parts = sorted((_artifacts(store, run_id) / "checkpoints").glob("part-*.parquet"))
    assert len(parts) == 2
    parts[1].write_bytes(parts[1].read_bytes()[:40])  # a copy cut short
    proc = run_sweep(args, tmp_path)
    assert "damaged" in proc.stdout + proc.stderr
    cells = cell_runs(store)
    assert len(cells) == 1 and cells["status"].iloc[0] == "FINISHED"
    art = _artifacts(store, run_id)
    quarantine = json.loads((art / "checkpoints" / "quarantine.json").read_text())
    assert [q["part"] for q in quarantine] == [f"checkpoints/{parts[1].name}"]
    counts = pd.Series(calls.read_text().split()).value_counts()
    assert sorted(counts.index) == [f"u{i:03d}" for i in range(12)]
    assert counts[[f"u{i:03d}" for i in range(4, 8)]].eq(2).all()  # the damaged part's units, again
    assert counts.drop([f"u{i:03d}" for i in range(4, 8)]).eq(1).all()
    assert len(pd.read_parquet(art / "samples.parquet")) == 12


@pytest.mark.slow
def test_all_units_failing_gives_a_failed_run_with_failures_json(tmp_path):
    proc = run_sweep([*TOY, f"dataset.unreadable=[{ALL}]"], tmp_path, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "all 12 units of toy · toy · toy failed" in out and "Traceback" not in out
    store = tmp_path / "mlruns"
    cell = cell_runs(store).iloc[0]
    assert cell["status"] == "FAILED"
    failures = json.loads((_artifacts(store, cell["run_id"]) / "failures.json").read_text())
    assert len(failures) == 12 and "truncated" in failures[0]["error"]


@pytest.mark.slow
def test_failed_units_are_retried_by_the_next_run_unless_kept(tmp_path):
    store = tmp_path / "mlruns"
    run_sweep(TOY, tmp_path, env=sweep_env(tmp_path, TOY_UNREADABLE="u003"))
    cell = cell_runs(store).iloc[0]
    assert cell["status"] == "FINISHED" and cell["metrics.n_failed_samples"] == 1
    kept = run_sweep([*TOY, "retry_failed=false"], tmp_path)
    assert "1 failed units kept" in kept.stdout + kept.stderr
    run_sweep(TOY, tmp_path)  # the input is readable now
    cells = cell_runs(store)
    assert len(cells) == 1 and cells["run_id"].iloc[0] == cell["run_id"]
    assert cells["status"].iloc[0] == "FINISHED" and cells["metrics.n_failed_samples"].iloc[0] == 0
    assert cells["metrics.n_samples"].iloc[0] == 12


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["../../x"])
def test_experiment_name_with_a_path_is_refused_before_anything_is_written(tmp_path, bad):
    proc = run_sweep([*TOY, f"tracking.experiment={bad}"], tmp_path, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "tracking.experiment=" in out and "not a valid name" in out and "Traceback" not in out
    assert not (tmp_path / "mlruns").exists()
    assert {p.name for p in tmp_path.iterdir()} <= {"outputs", "data", "multirun"}


@pytest.mark.slow
def test_bad_counts_are_refused_before_any_run(tmp_path):
    for args in (["checkpoint_every=-1"], ["max_samples=0"], ["max_samples=-1"],
                 ["-m", "model=toy,toy_double", "batch_size=0"]):
        arg = args[-1]
        proc = run_sweep([*TOY, *args], tmp_path, check=False)
        assert proc.returncode != 0 and arg.split("=")[0] in proc.stderr + proc.stdout
        assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.slow
def test_multirun_parent_ends_failed_with_a_failed_child_and_finished_after_the_fix(tmp_path):
    from tests.conftest import store_runs

    args = [*TOY, "-m", "model=toy,toy_double", "checkpoint_every=4"]
    proc = run_sweep(args, tmp_path, check=False, env=sweep_env(tmp_path, TOY_RAISE_AT="u005"))
    assert proc.returncode != 0
    runs = store_runs(tmp_path / "mlruns")
    parent = runs[runs["tags.countboard.role"] == "sweep"]
    assert len(parent) == 1 and parent["status"].iloc[0] == "FAILED"
    assert parent["tags.n_failed_children"].iloc[0] == "2"
    run_sweep(args, tmp_path)  # the cause is gone: both cells resume and the parent is FINISHED
    runs = store_runs(tmp_path / "mlruns")
    parent = runs[runs["tags.countboard.role"] == "sweep"]
    assert len(parent) == 1 and parent["status"].iloc[0] == "FINISHED"
    assert set(runs[runs["tags.countboard.role"] == "cell"]["status"]) == {"FINISHED"}
