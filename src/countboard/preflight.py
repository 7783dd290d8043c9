"""A cell's checks of what it needs before any run exists: the model's and the task's own ``preflight`` (weights,
local files, packages, settings) and what the task cannot take from the model.

The job runs them before it builds the dataset (``engine``), and a multirun runs them for its cells before its
parent run exists (``tracking.callbacks.check_some_cell_runs``), so a sweep none of whose cells can run is refused
in one line, with nothing created. Classes are found by their ``_target_`` at run time: this module imports none.

Example:
    >>> preflight_cell(cfg)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

if TYPE_CHECKING:
    from omegaconf import DictConfig


def preflight_cell(cfg: DictConfig) -> None:
    """Every check of this module on one cell's config; raises the ``CountboardError`` of the first that fails."""
    _preflight_model(cfg)
    _preflight_task(cfg)


def _preflight_model(cfg: DictConfig) -> None:
    """The model's own check of its code, weights and packages (``Counter.preflight``), before any run exists."""
    from hydra.utils import get_class

    try:
        cls = get_class(cfg.model._target_)
    except Exception:  # an unknown target is reported, with the valid keys, when the model is built
        return
    node = OmegaConf.to_container(cfg.model, resolve=True)
    _check_localises(cfg, cls, node)  # what the task cannot take, before what is missing to run it
    preflight = getattr(cls, "preflight", None)
    if preflight is not None:
        preflight(node)


def _preflight_task(cfg: DictConfig) -> None:
    """The task's own check of its settings (its class's ``preflight``: e.g. the metrics it is asked to run and the
    models they need), before the dataset is built and any run exists."""
    from hydra.utils import get_class

    try:
        cls = get_class(cfg.task._target_)
    except Exception:  # an unknown target is reported, with the valid keys, when the task is built
        return
    preflight = getattr(cls, "preflight", None)
    if preflight is not None:
        preflight(OmegaConf.to_container(cfg.task, resolve=True))


def _check_localises(cfg: DictConfig, model_cls: Any, node: dict) -> None:
    """A task that reads parts of the density maps (``needs_localisation``) refuses a counter whose maps locate
    nothing (``Counter.localises``), before any run exists."""
    from hydra.utils import get_class

    from countboard.errors import ConfigError

    try:
        task_cls = get_class(cfg.task._target_)
    except Exception:  # reported when the task is built
        return
    localises = getattr(model_cls, "localises", None)
    if getattr(task_cls, "needs_localisation", False) and localises is not None and not localises(node):
        raise ConfigError(f"task={cfg.task.get('name', '?')} needs counts per part of the image (each half of a "
                          f"mosaic) and model={node.get('name', '?')} answers one number per question, which says "
                          "nothing about where the objects are; run it on praco_negative, classic or "
                          "praco_multiclass, or use a model that points (model.answers=points)")
