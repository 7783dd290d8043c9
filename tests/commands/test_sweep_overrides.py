"""The sweep's own key check lets through every override form Hydra accepts, and Hydra then composes it."""

from __future__ import annotations

import pytest
from hydra import compose

from countboard.commands.sweep import unknown_key

BASE = ["model=procedural_good", "task=geckonum_autoeval"]

#: One override per form, each one Hydra accepts on top of ``BASE``; the check on the composed config.
FORMS = {
    "group@package=option": ("model@task.evaluator=shapecount_naive",
                             lambda cfg: cfg.task.evaluator.name == "shapecount_naive"),
    "+key=value": ("+task.evaluator.extra=1", lambda cfg: cfg.task.evaluator.extra == 1),
    "++key=value": ("++task.n_human=7", lambda cfg: cfg.task.n_human == 7),
    "~key": ("~task.sample_seed", lambda cfg: "sample_seed" not in cfg.task),
    "key=value": ("task.n_human=9", lambda cfg: cfg.task.n_human == 9),
    "group=option": ("dataset=shape_prompts", lambda cfg: cfg.dataset.name == "shape_prompts"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_override_form_passes_the_key_check_and_composes(hydra_init, form):
    override, check = FORMS[form]
    assert unknown_key(["-m", *BASE, override]) is None
    assert check(compose("config", overrides=[*BASE, override]))


def test_a_package_override_of_an_unknown_group_is_refused_in_one_line():
    message = unknown_key(["modle@task.evaluator=shapecount_naive"])
    assert "unknown config group `modle`" in message and "model" in message and "\n" not in message
