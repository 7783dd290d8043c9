"""The cells of a multirun as the sweepers launch them (``countboard.tracking.callbacks.sweep_jobs``): the basic
sweeper's cartesian product of the command line and ``params``, and the union of ``grids``."""

from __future__ import annotations

import itertools

import pytest

from countboard.tracking.callbacks import sweep_jobs
from tests.conftest import run_sweep, store_runs


def test_the_command_line_is_expanded_as_a_cartesian_product_in_launch_order():
    jobs = sweep_jobs({}, ["model=a,b", "task=x,y", "seed=0"], None)
    assert jobs == [[f"model={m}", f"task={t}", "seed=0"] for m, t in itertools.product("ab", "xy")]


def test_params_join_the_command_line_which_replaces_a_swept_key():
    jobs = sweep_jobs({"params": {"model": "a,b", "dataset": "d"}}, ["model=c"], None)
    assert [sorted(j) for j in jobs] == [["dataset=d", "model=c"]]


def test_grids_are_a_union_and_a_cell_of_two_grids_runs_once():
    grids = [{"model": "a,b", "task": "x"}, {"model": "b,c", "task": "x"}, {"model": "a", "task": "y"}]
    jobs = sweep_jobs({"grids": grids}, ["seed=1"], None)
    assert [dict(o.split("=") for o in j) for j in jobs] == [
        {"model": m, "task": t, "seed": "1"} for m, t in (("a", "x"), ("b", "x"), ("c", "x"), ("a", "y"))]


@pytest.mark.slow
def test_the_grids_sweeper_runs_the_cells_that_fit_and_refuses_a_sweep_with_none(tmp_path):
    grids = 'hydra.sweeper.grids=[{model:oracle,task:"praco_negative,text_acs"},{model:"oracle,class_blind",task:praco_negative}]'
    small = ["dataset.images_per_class={train:0,val:0,test:1}", "dataset.multi_class_images=0"]
    proc = run_sweep(["-m", "hydra/sweeper=grids", grids, "dataset=synthetic_shapes", *small], tmp_path, check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 1 and len(errors) == 1 and "job #1 (model=oracle task=text_acs" in errors[0], proc.stderr
    runs = store_runs(tmp_path / "mlruns")
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert sorted(cells["tags.model"]) == ["class_blind", "oracle"] and set(cells["status"]) == {"FINISHED"}
    none_fit = 'hydra.sweeper.grids=[{model:oracle,task:text_acs},{model:class_blind,task:geckonum_autoeval}]'
    proc = run_sweep(["-m", "hydra/sweeper=grids", none_fit], tmp_path, store=tmp_path / "other", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: none of the 2 cells of this sweep fits")
    assert not (tmp_path / "other").exists()
