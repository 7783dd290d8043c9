"""End-to-end tests of the sweep engine on the toy model/dataset/task (tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from countboard.cell import config_hash, flatten
from countboard.tracking.tags import library_versions
from tests.conftest import FIXTURES, run_sweep, store_runs, sweep_env

TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config"]


def artifact_dir(store: Path, run_id: str) -> Path:
    return next(store.glob(f"artifacts/*/{run_id}/artifacts"))


def children(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["tags.countboard.role"] == "cell"]


def test_multirun_2x2_then_rerun_adds_nothing(tmp_path):
    store = tmp_path / "mlruns"
    run_sweep([*TOY, "-m", "model=toy,toy_double", "task=toy,toy_b"], tmp_path)
    runs = store_runs(store)
    parents = runs[runs["tags.countboard.role"] == "sweep"]
    cells = children(runs)
    assert len(parents) == 1 and len(cells) == 4
    assert set(cells["status"]) == {"FINISHED"} and parents["status"].iloc[0] == "FINISHED"
    assert set(cells["tags.mlflow.parentRunId"]) == {parents["run_id"].iloc[0]}
    # the fixtures' configs are not the package's: their parameters that differ from the constructors' defaults
    # are the runs' protocols, named after the task
    assert set(cells["tags.mlflow.runName"]) == {
        "toy · toy · toy", "toy · toy · toy_b · label=toy_b", "toy_double · toy · toy · model.scale=2",
        "toy_double · toy · toy_b · label=toy_b, model.scale=2"}
    assert cells["tags.protocol"].nunique() == 4
    for col in ("model", "dataset", "task", "model_kind", "config_hash", "git_commit", "countboard_version",
                "device", "family"):
        assert cells[f"tags.{col}"].notna().all(), col
    versions = library_versions()  # the libraries' versions, tagged when the cell starts
    assert {"countboard.versions.torch", "countboard.versions.mlflow"} <= set(versions)
    for key, version in versions.items():
        assert set(cells[f"tags.{key}"]) == {version}, key
    assert cells["tags.config_hash"].nunique() == 4
    assert set(cells["params.model.scale"]) == {"1.0", "2.0"}
    double = cells[cells["tags.model"] == "toy_double"].iloc[0]
    assert double["metrics.mae"] == pytest.approx(sum(range(12)) / 12)  # |2x - x| averaged over x = 0..11
    assert double["metrics.n_samples"] == 12
    art = artifact_dir(store, double["run_id"])
    assert (art / "config.yaml").exists() and (art / "tables" / "errors.parquet").exists()
    assert len(pd.read_parquet(art / "samples.parquet")) == 12

    proc = run_sweep([*TOY, "-m", "model=toy,toy_double", "task=toy,toy_b"], tmp_path)
    assert (proc.stdout + proc.stderr).count("skip toy") == 4
    assert len(store_runs(store)) == 5


def test_precision_other_than_fp32_is_its_own_cell_and_tagged(tmp_path):
    run_sweep([*TOY, "-m", "precision=fp32,bf16"], tmp_path)
    cells = children(store_runs(tmp_path / "mlruns"))
    assert sorted(cells["tags.precision"]) == ["bf16", "fp32"]
    assert cells["tags.config_hash"].nunique() == 2
    assert set(cells["params.precision"]) == {"fp32", "bf16"}
    proc = run_sweep([*TOY, "precision=banana"], tmp_path, check=False)
    assert proc.returncode != 0 and "precision" in proc.stderr


def test_force_reruns_a_finished_cell(tmp_path):
    run_sweep(TOY, tmp_path)
    run_sweep([*TOY, "force=true"], tmp_path)
    cells = children(store_runs(tmp_path / "mlruns"))
    assert len(cells) == 2 and set(cells["status"]) == {"FINISHED"}


def test_sigkill_then_rerun_computes_every_sample_once(tmp_path):
    calls = tmp_path / "calls.log"
    args = [*TOY, f"task.calls_log={calls}", "task.kill_at=u008", "checkpoint_every=4"]
    first = run_sweep(args, tmp_path, check=False)
    assert first.returncode == -9  # SIGKILL at the start of the third chunk
    assert calls.read_text().split() == [f"u{i:03d}" for i in range(8)]
    run_sweep(args, tmp_path)
    computed = calls.read_text().split()
    assert sorted(computed) == [f"u{i:03d}" for i in range(12)]  # each exactly once
    cells = children(store_runs(tmp_path / "mlruns"))
    assert len(cells) == 1 and cells["status"].iloc[0] == "FINISHED"
    samples = pd.read_parquet(artifact_dir(tmp_path / "mlruns", cells["run_id"].iloc[0]) / "samples.parquet")
    assert sorted(samples["unit_id"]) == [f"u{i:03d}" for i in range(12)]


def test_failed_run_keeps_partials_and_rerun_resumes(tmp_path):
    calls = tmp_path / "calls.log"
    args = [*TOY, f"task.calls_log={calls}", "checkpoint_every=3"]
    failed = run_sweep(args, tmp_path, check=False, env=sweep_env(tmp_path, TOY_RAISE_AT="u007"))
    assert failed.returncode != 0
    store = tmp_path / "mlruns"
    cell = children(store_runs(store)).iloc[0]
    assert cell["status"] == "FAILED"
    assert "toy failure at u007" in cell["tags.error"]
    art = artifact_dir(store, cell["run_id"])
    parts = pd.concat(pd.read_parquet(p) for p in sorted((art / "checkpoints").glob("*.parquet")))
    assert sorted(parts["unit_id"]) == [f"u{i:03d}" for i in range(6)]
    assert "toy failure" in json.loads((art / "error.json").read_text())["error"]

    run_sweep(args, tmp_path)
    cells = children(store_runs(store))
    assert len(cells) == 1 and cells["status"].iloc[0] == "FINISHED"
    assert cells["run_id"].iloc[0] == cell["run_id"]
    # checkpointed units are not recomputed; u006 (computed in the chunk that raised) is computed again
    counts = pd.Series(calls.read_text().split()).value_counts()
    assert sorted(counts.index) == [f"u{i:03d}" for i in range(12)]
    assert counts.drop("u006").eq(1).all() and counts["u006"] == 2


def test_unreadable_inputs_are_counted_and_listed(tmp_path):
    run_sweep([*TOY, "dataset.unreadable=[u003,u010]"], tmp_path)
    cell = children(store_runs(tmp_path / "mlruns")).iloc[0]
    assert cell["metrics.n_failed_samples"] == 2 and cell["metrics.n_samples"] == 10
    failures = json.loads((artifact_dir(tmp_path / "mlruns", cell["run_id"]) / "failures.json").read_text())
    assert [f["unit_id"] for f in failures] == ["u003", "u010"]
    assert "truncated" in failures[0]["error"]


def test_unknown_option_lists_the_options(tmp_path):
    proc = run_sweep([*TOY, "model=nope"], tmp_path, check=False)
    assert proc.returncode != 0
    assert "no option `nope` in config group `model`" in proc.stderr and "toy_double" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_typo_in_a_top_level_key_fails_at_composition(tmp_path):
    proc = run_sweep([*TOY, "sede=3"], tmp_path, check=False)
    assert proc.returncode == 2
    assert "unknown config key `sede`" in proc.stderr and "seed" in proc.stderr and "model" in proc.stderr
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


def test_unknown_key_names_the_valid_ones():
    from countboard.commands.sweep import unknown_key

    assert unknown_key(["-m", "model=a,b", "seed=1", "+model.x=1", "task/classifier=vader", "hydra.verbose=true",
                        "--config-dir", "/x", "tracking.store_dir=/s", "model.recipe=aware"]) is None
    assert "tracking keys" in unknown_key(["tracking.storedir=/s"])
    assert "batch_size" in unknown_key(["batchsize=4"])


def test_bad_model_parameter_names_the_valid_keys(tmp_path):
    proc = run_sweep([*TOY, "+model.scal=2"], tmp_path, check=False)
    assert proc.returncode != 0
    assert "model.scal is not a key of model" in proc.stderr and "valid keys: scale" in proc.stderr
    assert not (tmp_path / "mlruns").exists()  # refused before the store was touched


def test_invalid_device_value_lists_choices(tmp_path):
    proc = run_sweep([*TOY, "device=gpu"], tmp_path, check=False)
    assert proc.returncode != 0 and "auto" in proc.stdout + proc.stderr and "cuda" in proc.stdout + proc.stderr


def test_unreachable_store_fails_before_compute(tmp_path):
    calls = tmp_path / "calls.log"
    proc = run_sweep([*TOY, "tracking=server", "tracking.uri=http://127.0.0.1:9", "tracking.timeout_s=2",
                      f"task.calls_log={calls}"], tmp_path, check=False)
    assert proc.returncode != 0
    assert "cannot reach the MLflow server at http://127.0.0.1:9" in proc.stderr
    assert not calls.exists()


def test_config_hash_ignores_operational_keys_and_interpolation_targets():
    base = OmegaConf.create({"model": {"name": "a", "root": "${data_dir}/x"}, "seed": 0, "data_dir": "/d1",
                             "tracking": {"store_dir": "s1"}, "device": "cpu", "batch_size": 8})
    other = OmegaConf.create({"model": {"name": "a", "root": "${data_dir}/x"}, "seed": 0, "data_dir": "/d2",
                              "tracking": {"store_dir": "s2"}, "device": "cuda", "batch_size": 32})
    assert config_hash(base) == config_hash(other)
    changed = OmegaConf.create({**OmegaConf.to_container(base), "seed": 1})
    assert config_hash(changed) != config_hash(base)


def test_config_hash_ignores_how_the_model_is_fed_but_not_what_it_computes():
    def cfg(**model):
        return OmegaConf.create({"model": {"name": "owlv2", "score_threshold": 0.2, **model}, "seed": 0})

    assert config_hash(cfg(image_batch_size=2)) == config_hash(cfg(image_batch_size="auto")) == config_hash(cfg())
    assert config_hash(cfg(score_threshold=0.3)) != config_hash(cfg())


def test_flatten_nested_config():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": "[1, 2]", "d": None}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_parallel_launchers_run_a_two_cell_sweep(tmp_path, launcher):
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    run_sweep([*TOY, "-m", "model=toy,toy_double", f"hydra/launcher={launcher}", *extra], tmp_path)
    runs = store_runs(tmp_path / "mlruns")
    cells = children(runs)
    assert len(cells) == 2 and set(cells["status"]) == {"FINISHED"}
    parent = runs[runs["tags.countboard.role"] == "sweep"]["run_id"].iloc[0]
    assert set(cells["tags.mlflow.parentRunId"]) == {parent}


@pytest.mark.slow
def test_parallel_jobs_share_the_sqlite_store_without_losing_runs(tmp_path):
    run_sweep([*TOY, "-m", "model=toy,toy_double", "task=toy,toy_b", "seed=0,1,2", "hydra/launcher=joblib",
               "hydra.launcher.n_jobs=2", "checkpoint_every=1"], tmp_path, timeout=600)
    cells = children(store_runs(tmp_path / "mlruns"))
    assert len(cells) == 12 and set(cells["status"]) == {"FINISHED"}


@pytest.mark.slow
def test_sweep_over_http_to_a_real_mlflow_server(tmp_path, mlflow_server_url):
    url = mlflow_server_url
    run_sweep([*TOY, "-m", "model=toy,toy_double", "tracking=server", f"tracking.uri={url}"], tmp_path,
              env=sweep_env(tmp_path, MLFLOW_TRACKING_URI=url))
    import mlflow

    client = mlflow.MlflowClient(url)
    exp = client.get_experiment_by_name("countboard/engine")  # the toy family's experiment
    runs = client.search_runs([exp.experiment_id])
    cells = [r for r in runs if r.data.tags.get("countboard.role") == "cell"]
    assert len(cells) == 2 and {r.info.status for r in cells} == {"FINISHED"}
    assert {a.path for a in client.list_artifacts(cells[0].info.run_id)} >= {"samples.parquet", "config.yaml"}


@pytest.mark.slow
def test_smoke_run_is_its_own_partial_cell_and_seeds_share_a_replicate_hash(tmp_path):
    run_sweep([*TOY, "-m", "max_samples=5,null", "seed=0,1"], tmp_path)
    cells = children(store_runs(tmp_path / "mlruns"))
    assert len(cells) == 4 and cells["tags.config_hash"].nunique() == 4
    smoke = cells[cells["tags.partial"] == "true"]
    full = cells[cells["tags.partial"] == "false"]
    assert len(smoke) == 2 and set(smoke["tags.n_units"]) == {"5"} and set(smoke["tags.total_units"]) == {"12"}
    assert set(smoke["metrics.n_samples"]) == {5.0} and set(full["tags.n_units"]) == {"12"}
    assert full["tags.replicate_hash"].nunique() == 1 and set(full["tags.seed"]) == {"0", "1"}
    assert set(full["tags.mlflow.runName"]) == {"toy · toy · toy", "toy · toy · toy · seed 1"}
    assert smoke["tags.replicate_hash"].nunique() == 1  # the smoke seeds group together, apart from the full ones
    assert full["tags.replicate_hash"].iloc[0] != smoke["tags.replicate_hash"].iloc[0]


def test_subset_filters_of_a_node_make_a_run_partial():
    from countboard.engine import _subset_filters

    cfg = OmegaConf.create({"model": {"name": "m"}, "dataset": {"max_images": 10, "max_prompts": None},
                            "task": {"max_samples": None}})
    assert _subset_filters(cfg) == ["dataset.max_images=10"]
    cfg.dataset.max_images = None
    assert _subset_filters(cfg) == []
