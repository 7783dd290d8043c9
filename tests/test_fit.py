"""What fits what (``countboard.fit``): every model kind x task x dataset pair of ``conf/``, checked by reading the
configs (no run), each task's own default dataset, and the one line a misfit gets."""

from __future__ import annotations

import itertools

import pytest
import yaml
from hydra import compose
from omegaconf import OmegaConf

from countboard.cell import config_hash
from countboard.errors import ConfigError
from countboard.fit import KIND_WORDS, check_fit, conf_kinds, kinds_of, misfits
from countboard.paths import conf_dir

#: What each task takes, written out here apart from the task classes' declarations.
TAKES = {
    "praco_negative": ({"counter"}, {"counting"}),
    "praco_mosaic": ({"counter"}, {"counting"}),
    "classic": ({"counter"}, {"counting"}),
    "praco_multiclass": ({"counter"}, {"multiclass_counting"}),
    "grounding": ({"vlm", "counter"}, {"grounding"}),
    "geckonum_autoeval": ({"generator"}, {"image_prompts"}),
    "text_acs": ({"text_generator"}, {"text_prompts"}),
    "bcc": ({"classifier"}, {"judged_outputs"}),
    "countbench": ({"counter"}, {"counting"}),
    "geckonum_vqa": ({"counter"}, {"counting"}),
    "geckonum_autometrics": ({"generator"}, {"image_prompts"}),
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))


def task_target(task: str) -> str:
    return yaml.safe_load((conf_dir() / "task" / f"{task}.yaml").read_text())["_target_"]


def test_every_model_and_dataset_option_declares_a_known_kind():
    for group in ("model", "dataset"):
        kinds = conf_kinds(group)
        assert sorted(kinds) == options(group), f"{group} options without a kind: {set(options(group)) - set(kinds)}"
        named = {k for kind in kinds.values() for k in kinds_of(kind)}
        assert named <= set(KIND_WORDS), named - set(KIND_WORDS)
    assert sorted(TAKES) == options("task")


def test_every_model_task_dataset_pair_of_conf_is_checked():
    models, datasets = conf_kinds("model"), conf_kinds("dataset")
    n_fit = 0
    for task, (model, mkind), (dataset, dkind) in itertools.product(TAKES, models.items(), datasets.items()):
        found = misfits(task, task_target(task), (model, mkind), (dataset, dkind))
        wanted_models, wanted_datasets = TAKES[task]
        expected = (not set(kinds_of(mkind)) & wanted_models) + (not set(kinds_of(dkind)) & wanted_datasets)
        assert len(found) == expected, (task, model, dataset, found)
        n_fit += not found
        for line in found:
            assert line.startswith(f"task={task} takes ") and "\n" not in line
            group, name = ("model", model) if f"model={model} is" in line else ("dataset", dataset)
            fitting = [o for o, k in (models if group == "model" else datasets).items()
                       if set(kinds_of(k)) & (wanted_models if group == "model" else wanted_datasets)]
            assert all(o in line for o in fitting), (line, fitting)  # it names every option that fits
            assert f"{group}=<option>" in line
    assert n_fit > 50  # the pairs that fit are many: counters on counting sets, generators on prompt sets, ...


@pytest.mark.parametrize("task", sorted(TAKES))
def test_each_task_defaults_to_a_dataset_it_takes(hydra_init, task):
    cfg = compose("config", overrides=[f"task={task}"])
    assert set(kinds_of(cfg.dataset.kind)) & TAKES[task][1], (task, cfg.dataset.name)
    # the user's choice still wins
    other = "fsc147" if cfg.dataset.name != "fsc147" else "synthetic_shapes"
    assert compose("config", overrides=[f"task={task}", f"dataset={other}"]).dataset.name == other


@pytest.mark.parametrize(("overrides", "says"), [
    (["model=sd15", "task=praco_negative"], "task=praco_negative takes a counter; model=sd15 is a text-to-image "
                                            "generator; counters: class_blind, clipseg,"),
    (["model=procedural_good", "task=praco_negative"], "model=procedural_good is a text-to-image generator"),
    (["model=oracle", "task=geckonum_autoeval"], "takes a text-to-image generator; model=oracle is a counter; "
                                                 "text-to-image generators: flux_schnell, geckonum_release, procedural_good,"),
    (["model=box_oracle", "task=praco_mosaic", "dataset=synthetic_grounding"],
     "model=box_oracle is a vision-language model; counters: class_blind, clipseg, "),
    (["model=procedural_good", "task=geckonum_autoeval", "model@task.evaluator=sd15"],
     "task=geckonum_autoeval takes a counter as task.evaluator; sd15 is a text-to-image generator; counters: "
     "class_blind, clipseg,"),
    (["model=oracle", "task=praco_negative", "dataset=shape_prompts"],
     "task=praco_negative takes a counting dataset (one class per image, FSC-147 layout); dataset=shape_prompts is "
     "a prompt set for image generators; counting datasets: capture, countbench, countqa, fsc147, fscd147, "
     "geckonum_release, mucca, pairtally, pixmo_count, synthetic_shapes, tallyqa (choose with dataset=<option>)"),
])
def test_a_misfit_is_one_line_naming_what_fits(hydra_init, overrides, says):
    with pytest.raises(ConfigError) as caught:
        check_fit(compose("config", overrides=overrides))
    assert says in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("overrides", [["model=oracle", "task=grounding"], ["model=sd15", "task=geckonum_autoeval"],
                                       ["model=oracle"], ["model=simulated_classifier", "task=bcc"]])
def test_cells_that_fit_pass(hydra_init, overrides):
    check_fit(compose("config", overrides=overrides))


def test_a_node_without_a_kind_is_not_refused():
    assert misfits("praco_negative", task_target("praco_negative"), ("mine", None), ("data", None)) == []
    assert misfits("toy", "countboard_toy.ToyTask", ("sd15", "generator"), ("x", "counting")) == []


def test_the_dataset_kind_leaves_the_cell_identity_alone(hydra_init):
    cfg = compose("config", overrides=["dataset=synthetic_shapes"])
    without = cfg.copy()
    OmegaConf.set_struct(without, False)
    del without.dataset["kind"]
    assert "kind" in cfg.dataset and config_hash(cfg) == config_hash(without)


def test_a_dataset_of_several_kinds_fits_each_task_that_takes_one_of_them():
    assert conf_kinds("dataset")["pairtally"] == ("counting", "multiclass_counting")
    for task in ("classic", "praco_negative", "praco_multiclass"):
        assert misfits(task, task_target(task), ("oracle", "counter"), ("pairtally", ("counting", "multiclass_counting"))) == []
    line, = misfits("grounding", task_target("grounding"), ("oracle", "counter"),
                    ("pairtally", ("counting", "multiclass_counting")))
    assert "dataset=pairtally is a counting dataset (one class per image, FSC-147 layout) and a multi-class" in line
