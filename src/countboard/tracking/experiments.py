"""Which MLflow experiment a run goes to, and which experiments hold the runs of a cell.

New runs go to one experiment per family group: ``tracking.experiment`` is a name pattern, by default
``countboard/{family}``, whose ``{family}`` is the leaderboard page of the run's family (``counters``,
``numeracy``, ``acs``, ``grounding``; a family without a page keeps its own key, e.g. ``engine``). So the MLflow
runs table of ``countboard/counters`` lists counters only, with their metrics as columns, and no experiment holds
a lab's every run. A pattern without ``{family}`` names one experiment for everything, as before.

A multirun may span families: its parent run lives in the experiment of the group ``sweeps``
(``countboard/sweeps``), and its children in their families' experiments, each tagged with the parent's id.

Stores written before experiments were split keep everything in the experiment ``countboard``: the pattern's part
before ``/{family}`` (``single_experiment``) is searched with the family experiments, so a finished cell found
there is skipped, a stopped one resumed there, an earlier sweep's parent reused, an import not logged twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from countboard.config import validate_experiment

#: The placeholder of ``tracking.experiment`` filled with the run's family group.
FAMILY_FIELD = "{family}"
DEFAULT_PATTERN = "countboard/" + FAMILY_FIELD
#: The family group of multirun parent runs (a sweep may span families).
SWEEPS_GROUP = "sweeps"


def family_group(family: str | None) -> str:
    """The group a family's runs are kept under: its leaderboard page, else its own key (``other`` if none).

    Example:
        >>> family_group("generator_autoeval")
        'numeracy'
    """
    from countboard.schema import load_schema

    info = load_schema().families.get(family or "")
    return (info.page if info is not None and info.page else family) or "other"


def experiment_name(pattern: str, family: str | None = None, group: str | None = None) -> str:
    """The experiment of a run of ``family`` (or of the family group ``group``) under ``pattern``.

    Example:
        >>> experiment_name("countboard/{family}", "counters")
        'countboard/counters'
        >>> experiment_name("lab", "counters")
        'lab'
    """
    validate_experiment(pattern, "tracking.experiment")
    if FAMILY_FIELD not in pattern:
        return pattern
    return pattern.replace(FAMILY_FIELD, group or family_group(family))


def matches(pattern: str, name: str) -> bool:
    """Whether experiment ``name`` is one that ``pattern`` names (for some family group)."""
    if FAMILY_FIELD not in pattern:
        return name == pattern
    head, tail = pattern.split(FAMILY_FIELD, 1)
    middle = name[len(head):len(name) - len(tail)] if len(name) > len(head) + len(tail) else ""
    return name.startswith(head) and name.endswith(tail) and bool(middle) and "/" not in middle


def single_experiment(pattern: str) -> str | None:
    """The one experiment that held every run before ``pattern`` split them by family: the part before
    ``/{family}`` (``countboard`` for ``countboard/{family}``); None for a pattern of another shape.

    Example:
        >>> single_experiment("countboard/{family}")
        'countboard'
    """
    suffix = "/" + FAMILY_FIELD
    return pattern[:-len(suffix)] if pattern.endswith(suffix) and len(pattern) > len(suffix) else None


def search_ids(experiments: Iterable, pattern: str, first: str | None = None) -> list[str]:
    """Ids of the active experiments that may hold a cell's runs under ``pattern``: ``first`` (the run's own
    experiment id) first, then every experiment the pattern names, and its ``single_experiment``.

    Args:
        experiments: MLflow experiments of the store (``Tracker.experiments()``).
        pattern: ``tracking.experiment``.
        first: The id to put first (where new runs of the cell go).
    """
    ids = [first] if first else []
    single = single_experiment(pattern)
    for exp in experiments:
        wanted = matches(pattern, exp.name) or exp.name == single
        if wanted and str(exp.experiment_id) not in ids:
            ids.append(str(exp.experiment_id))
    return ids
