"""One MLflow experiment per family group: names, the experiments a cell's runs are looked for in, older stores."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from countboard.config import validate_experiment
from countboard.errors import ConfigError
from countboard.tracking import tracker_from_config
from countboard.tracking.experiments import (
    DEFAULT_PATTERN,
    experiment_name,
    family_group,
    matches,
    search_ids,
    single_experiment,
)
from tests.conftest import FIXTURES, run_sweep, store_runs

TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config"]


def test_families_are_grouped_by_their_leaderboard_page():
    assert family_group("counters") == "counters"
    assert family_group("generators") == family_group("generator_autoeval") == "numeracy"
    assert family_group("acs") == "acs" and family_group("grounding") == "grounding"
    assert family_group("engine") == "engine"  # no page: its own key
    assert family_group(None) == "other"


def test_names_from_the_pattern():
    assert experiment_name(DEFAULT_PATTERN, "counters") == "countboard/counters"
    assert experiment_name(DEFAULT_PATTERN, group="sweeps") == "countboard/sweeps"
    assert experiment_name("lab {family} runs", "generators") == "lab numeracy runs"
    assert experiment_name("one", "counters") == "one"


@pytest.mark.parametrize("bad", ["../{family}", "a//b", "{family}/{family}", "/abs", "a\\b", "x/"])
def test_unsafe_patterns_are_refused(bad):
    with pytest.raises(ConfigError, match="not a valid name"):
        validate_experiment(bad, "tracking.experiment")


def test_which_experiments_hold_a_cells_runs():
    assert matches(DEFAULT_PATTERN, "countboard/counters")
    assert not matches(DEFAULT_PATTERN, "countboard/") and not matches(DEFAULT_PATTERN, "countboard/a/b")
    assert not matches(DEFAULT_PATTERN, "countboard") and not matches(DEFAULT_PATTERN, "other/counters")
    assert single_experiment(DEFAULT_PATTERN) == "countboard" and single_experiment("one") is None
    exps = [SimpleNamespace(experiment_id=i, name=n) for i, n in
            [("0", "Default"), ("1", "countboard"), ("2", "countboard/acs"), ("3", "countboard/counters"),
             ("4", "countboard-training"), ("5", "lab")]]
    assert search_ids(exps, DEFAULT_PATTERN, "3") == ["3", "1", "2"]
    assert search_ids(exps, "lab") == ["5"]  # a pattern without {family}: that experiment only


def test_imports_and_one_off_runs_go_to_their_familys_experiment_once(tmp_path):
    tracker = tracker_from_config({"kind": "local", "store_dir": str(tmp_path / "mlruns")})
    tags = {"countboard.role": "import", "family": "generators", "config_hash": "h1"}
    old = tracker.log_complete_run("countboard", "old import", tags)  # a store of one experiment
    assert tracker.log_complete_run(DEFAULT_PATTERN, "again", tags) is None  # found in the older experiment
    new = tracker.log_complete_run(DEFAULT_PATTERN, "new", {**tags, "config_hash": "h2"})
    names = {e.experiment_id: e.name for e in tracker.experiments()}
    assert names[tracker.client.get_run(old).info.experiment_id] == "countboard"
    assert names[tracker.client.get_run(new).info.experiment_id] == "countboard/numeracy"
    art = tracker.client.get_experiment_by_name("countboard/numeracy").artifact_location
    assert art.endswith("/artifacts/countboard-numeracy")  # one folder below artifacts/, as relocation expects


@pytest.mark.slow
def test_sweeps_write_per_family_and_skip_the_cells_of_an_older_single_experiment(tmp_path):
    run_sweep([*TOY, "model=toy", "tracking.experiment=countboard"], tmp_path)  # as older versions wrote
    proc = run_sweep([*TOY, "-m", "model=toy,toy_double"], tmp_path)
    assert (proc.stdout + proc.stderr).count("skip toy") == 1  # the finished cell of the older experiment
    runs = store_runs(tmp_path / "mlruns")
    tracker = tracker_from_config({"kind": "local", "store_dir": str(tmp_path / "mlruns")})
    names = {e.experiment_id: e.name for e in tracker.experiments()}
    where = {(r["tags.countboard.role"], r["tags.model"] if r["tags.model"] == r["tags.model"] else ""):
             names[r["experiment_id"]] for _, r in runs.iterrows() if r["tags.countboard.role"] != "lease"}
    assert where == {("cell", "toy"): "countboard", ("cell", "toy_double"): "countboard/engine",
                     ("sweep", ""): "countboard/sweeps"}
    cell = runs[runs["tags.model"] == "toy_double"].iloc[0]
    (data,) = tracker.client.get_run(cell["run_id"]).inputs.dataset_inputs  # the cell's dataset, MLflow's way
    assert data.dataset.name == "toy" and len(data.dataset.digest) == 16  # digested by its config: no data files
    sweep = runs[runs["tags.countboard.role"] == "sweep"].iloc[0]
    assert sweep["status"] == "FINISHED" and sweep["tags.n_children"] == "1"
