"""Values are checked before any run exists; names cannot leave the store; operational keys are listed once."""

from __future__ import annotations

from dataclasses import fields

import pytest
from omegaconf import OmegaConf

from countboard.cell import config_hash
from countboard.config import OPERATIONAL_KEYS, Config, validate, validate_name
from countboard.errors import ConfigError


def _cfg(**over):
    base = {"seed": 0, "batch_size": 8, "checkpoint_every": 16, "max_samples": None, "device": "auto",
            "lease_ttl_s": 60, "tracking": {"kind": "local", "store_dir": "mlruns", "experiment": "countboard",
                                            "timeout_s": 10}}
    return OmegaConf.create({**base, **over})


@pytest.mark.parametrize(("key", "value"), [("checkpoint_every", -1), ("checkpoint_every", 0), ("batch_size", 0),
                                            ("max_samples", 0), ("max_samples", -1), ("seed", -3),
                                            ("lease_ttl_s", 0), ("device", "gpu"), ("batch_size", "big"),
                                            ("num_workers", -1), ("num_workers", "many"), ("num_workers", True)])
def test_bad_values_name_their_key(key, value):
    with pytest.raises(ConfigError, match=key):
        validate(_cfg(**{key: value}))


def test_good_values_pass():
    validate(_cfg(max_samples=5))
    validate(_cfg())
    validate(_cfg(batch_size="auto", num_workers="auto"))
    validate(_cfg(num_workers=0))
    with pytest.raises(ConfigError, match="must be a positive integer or auto"):
        validate(_cfg(batch_size="lots"))


@pytest.mark.parametrize("name", ["../../x", "a/b", "a\\b", "..", "", "x" * 201, "/abs", "a..b"])
def test_unsafe_names_are_refused(name):
    with pytest.raises(ConfigError, match="not a valid name"):
        validate_name(name, "tracking.experiment")


def test_store_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        validate(_cfg(tracking={"kind": "local", "store_dir": str(tmp_path / "f"), "experiment": "e"}))


def test_every_top_level_key_is_hashed_or_listed_as_operational():
    hashed = {f.name for f in fields(Config)} - set(OPERATIONAL_KEYS)
    assert hashed == {"model", "dataset", "task", "seed", "max_samples", "precision"}  # precision: test_precision
    assert all(reason.strip() for reason in OPERATIONAL_KEYS.values())
    cfg = OmegaConf.structured(Config)
    for key in hashed - {"model", "dataset", "task", "precision"}:
        changed = OmegaConf.merge(cfg, {key: 7})
        assert config_hash(changed) != config_hash(cfg), key
    for key in set(OPERATIONAL_KEYS) - {"hydra", "tracking", "device", "on_busy"}:
        value = {"force": True, "progress": False, "retry_failed": False, "data_dir": "/elsewhere"}.get(key, 3)
        assert config_hash(OmegaConf.merge(cfg, {key: value})) == config_hash(cfg), key


def test_data_identity_is_the_fingerprint_not_the_path(tmp_path):
    from countboard.fingerprint import path_fingerprint

    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "images").mkdir(parents=True)
        (root / "images" / "1.jpg").write_bytes(b"\xff" * 100)
        (root / "annotations.json").write_text('{"1": 3}')
    assert path_fingerprint(a) == path_fingerprint(b)  # same data in another place
    (b / "annotations.json").write_text('{"1": 4}')
    assert path_fingerprint(a) != path_fingerprint(b)  # an edited annotation is other data
    cfg = OmegaConf.create({"dataset": {"root": "${data_dir}/d"}, "data_dir": "/x"})
    assert config_hash(cfg, path_fingerprint(a)) != config_hash(cfg, path_fingerprint(b))


@pytest.mark.parametrize(("overrides", "message"), [
    (["model=oracle", "+model.bogus=1"], "model.bogus is not a key of model .*it takes no keys"),
    (["task=praco_mosaic", "+task.bogus.x=1"], "task.bogus is not a key of task .*valid keys: classes, .*mosaic, "
                                               "n_figures, official_rounding, orientation"),
    (["task=praco_mosaic", "task.n_figures=abc"], "task.n_figures='abc' is a str, but .* expects int"),
    (["dataset=synthetic_shapes", "+dataset.max_images=many"], "dataset.max_images='many' is a str"),
    (["task=praco_negative", "task.official_rounding=3"], "task.official_rounding=3 is a int, but .* expects bool"),
])
def test_bad_node_keys_and_types_fail_before_anything_is_built(compose_cfg, overrides, message):
    from countboard.config import check_nodes

    with pytest.raises(ConfigError, match=message):
        check_nodes(compose_cfg(*overrides))


def test_good_node_values_pass(compose_cfg):
    from countboard.config import check_nodes

    check_nodes(compose_cfg("model=class_blind", "task=praco_mosaic", "task.n_figures=2", "task.tile_size=[64,64]",
                            "dataset=synthetic_shapes", "+dataset.max_images=3"))


@pytest.mark.slow
def test_a_sweep_with_a_bad_nested_key_touches_no_store(tmp_path):
    import time

    from tests.conftest import run_sweep

    store = tmp_path / "store"
    t0 = time.monotonic()
    proc = run_sweep(["model=oracle", "+model.bogus=1", "task=praco_negative", "seed=7"], tmp_path, store=store,
                     check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr
    assert "model.bogus is not a key of model" in errors[0]
    assert not store.exists()  # no store, no run, no lock
    assert time.monotonic() - t0 < 120
