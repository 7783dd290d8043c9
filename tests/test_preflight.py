"""What a model needs on this machine is checked before any run exists (``countboard.preflight``): one line, no
run, no store; keys the model's name decides are derived from it, and hash as the values they replaced."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from countboard.cell import config_hash
from countboard.errors import ConfigError
from tests.conftest import run_sweep


def _error_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.mark.slow
def test_missing_local_checkpoint_is_one_line_and_no_run(tmp_path):
    """``model=shapecount_aware`` before ``countboard train-counter``: a single run, then a multirun."""
    store = tmp_path / "mlruns"
    proc = run_sweep(["model=shapecount_aware", "task=praco_negative"], tmp_path, store=store, check=False)
    lines = _error_lines(proc)
    assert proc.returncode != 0
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: no shapecount checkpoint for recipe 'aware'")
    assert "countboard train-counter --recipe aware" in lines[0] and "Traceback" not in proc.stderr
    assert not store.exists()  # no run, not even an empty store

    proc = run_sweep(["-m", "model=shapecount_aware", "task=praco_negative,praco_mosaic"], tmp_path, store=store,
                     check=False)
    lines = _error_lines(proc)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "every one of the 2 cells of this sweep; nothing was run or created" in lines[0]
    assert not store.exists()


@pytest.mark.slow
def test_a_sweep_with_one_runnable_cell_runs_it_and_names_the_other(tmp_path):
    from tests.conftest import store_runs

    store = tmp_path / "mlruns"
    proc = run_sweep(["-m", "model=oracle,shapecount_aware", "task=praco_negative", "dataset.max_images=4"],
                     tmp_path, store=store, check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 1
    assert len(errors) == 1 and "model=shapecount_aware" in errors[0] and "no shapecount checkpoint" in errors[0]
    runs = store_runs(store)
    children = runs[runs["tags.model"].notna()]
    assert children["tags.model"].tolist() == ["oracle"]  # no FAILED run for the cell that cannot run
    assert children["status"].tolist() == ["FINISHED"]


def test_explicit_checkpoint_path_is_checked(tmp_path):
    from countboard.counting.models.shapecount import ShapeCountCounter

    node = {"recipe": "aware", "checkpoint": str(tmp_path / "nope.pt"), "data_dir": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"model.checkpoint=.*nope.pt: the file does not exist"):
        ShapeCountCounter.preflight(node)
    with pytest.raises(ConfigError, match="no shapecount checkpoint for recipe 'naive'"):
        ShapeCountCounter.preflight({"recipe": "naive", "checkpoint": None, "data_dir": str(tmp_path)})


def test_text_classifier_folder_is_checked(tmp_path):
    from countboard.acs.models.text_classifiers import EmbeddingZeroShotClassifier
    from countboard.models.hf_loading import node_key

    with node_key("task.classifier"), pytest.raises(ConfigError, match=r"task.classifier.model_path"):
        EmbeddingZeroShotClassifier.preflight({"name": "minilm", "model_path": str(tmp_path / "missing")})
    EmbeddingZeroShotClassifier.preflight({"name": "minilm", "model_path": None})


def test_told_negative_class_is_derived_from_the_name(compose_cfg):
    from countboard.counting.models.praco_zoo import _check_conventions

    for name, told in (("CountGD", False), ("CountGDPlusPlus", True), ("DAVE", False)):
        cfg = compose_cfg("model=praco_zoo", f"model.name={name}", "task=praco_negative")
        node = OmegaConf.to_container(cfg.model, resolve=True)
        assert node["told_negative_class"] is told and node["needs_exemplars"] is told
        _check_conventions(name, node)  # no longer demanded from the user
    assert compose_cfg("model=praco_countgdplusplus").model.told_negative_class is True
    cfg = compose_cfg("model=praco_zoo", "model.name=CountGD", "model.told_negative_class=true")
    with pytest.raises(ConfigError, match="must be false for CountGD"):
        _check_conventions("CountGD", OmegaConf.to_container(cfg.model, resolve=True))


@pytest.mark.parametrize("model", ["praco_zoo", "praco_countgd", "praco_dave", "praco_countgdplusplus"])
def test_derived_keys_hash_as_the_values_they_replaced(compose_cfg, model):
    """A cell finished when the keys were written as ``false`` keeps its hash (reruns still find it)."""
    cfg = compose_cfg(f"model={model}", "task=praco_negative")
    literal = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    for key in ("told_negative_class", "needs_exemplars"):
        literal.model[key] = bool(OmegaConf.select(cfg, f"model.{key}"))
    assert "${cb." in str(OmegaConf.to_container(cfg.model, resolve=False)["told_negative_class"]) or \
        model == "praco_countgdplusplus"
    assert config_hash(cfg, "data") == config_hash(literal, "data")
