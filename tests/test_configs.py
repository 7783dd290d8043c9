"""Every option of every config group composes, and its node matches the class it builds."""

from __future__ import annotations

import pytest
from hydra import compose

from countboard.cell import config_hash
from countboard.config import check_node
from countboard.paths import conf_dir

GROUPS = ("model", "dataset", "task", "tracking", "experiment")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes(hydra_init, group, option):
    cfg = compose("config", overrides=[f"{group}={option}"])
    for node in ("model", "dataset", "task"):
        extra = ("device",) if node == "model" else ()
        check_node(cfg, node, extra)
        assert cfg[node].name, f"{group}={option}: {node} has no name"
    assert cfg.model.kind in {"counter", "generator", "evaluator", "vlm", "text_generator", "classifier", "human"}
    from hydra.utils import get_class

    # the kind a model's config declares (what tasks take it, ``countboard.fit``) is its class's, where it has one
    assert getattr(get_class(cfg.model._target_), "kind", cfg.model.kind) == cfg.model.kind
    assert len(config_hash(cfg)) == 16


def test_every_group_has_options():
    for group in ("model", "dataset", "task", "tracking"):
        assert options(group), group


@pytest.mark.parametrize("option", options("mosaic"))
def test_mosaic_presets_set_the_mosaic_task_and_name_the_same_cell_as_its_keys(hydra_init, option):
    preset = compose("config", overrides=["task=praco_mosaic", f"mosaic={option}"])
    check_node(preset, "task")
    assert preset.task.mosaic == option
    by_keys = compose("config", overrides=["task=praco_mosaic", f"task.mosaic={option}"])
    assert config_hash(preset) == config_hash(by_keys)
    assert compose("config", overrides=["task=praco_mosaic"]).task.mosaic == "default"  # no preset: the default
