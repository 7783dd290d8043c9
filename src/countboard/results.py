"""The task protocol: what the engine asks of every task.

A task turns a model and a dataset into per-unit records, then into metrics and artifacts:

1. ``units(model, dataset, ctx)`` lists stable unit ids (an image, an image×prompt pair, a prompt…), in a fixed
   order. The engine checkpoints records every ``checkpoint_every`` units, so a killed job resumes with the units
   that have no record yet.
2. ``run_units(model, dataset, unit_ids, ctx)`` evaluates a batch of units and returns one flat record (dict of
   scalars, strings or short lists) per unit, each with its ``unit_id``. A unit whose input cannot be read or
   evaluated returns ``{"unit_id": ..., "error": "<what went wrong>"}`` instead of raising: the engine counts it in
   ``n_failed_samples`` and lists it in ``failures.json``. A task that reads its inputs from the dataset lists
   them in ``input_keys`` and reads them with ``ctx.load``: they are then decoded ahead by the job's loader
   workers (``countboard.inputs``); it calls the model through ``ctx.batches``, which sizes the batches
   (``batch_size``, ``auto``: ``countboard.batching``) and halves one that runs out of memory.
3. ``summarize(records, model, dataset, ctx)`` turns the successful records (a DataFrame) into a ``TaskResult``.

Metric keys must be declared in ``countboard/schema/*.yaml``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from countboard.batching import Batching
from countboard.inputs import InputStream


@dataclass
class RunContext:
    """What a task needs to know about the job it runs in."""

    device: str
    seed: int
    batch_size: int
    work_dir: Path
    progress: bool = True
    max_samples: int | None = None
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("countboard"))
    inputs: InputStream | None = None
    batching: Batching | None = None

    def __post_init__(self) -> None:
        if self.batching is None:
            self.batching = Batching(self.batch_size, self.device)
        self.batch_size = self.batching.size

    def rng(self, *salt: int) -> np.random.Generator:
        """A generator seeded by the job's seed and ``salt`` (same salt, same stream)."""
        return np.random.default_rng([self.seed, *salt])

    def load(self, dataset: Any, key: str) -> Any:
        """``dataset.load(key)``, decoded ahead by the job's loader workers when the task listed the key."""
        return self.inputs.get(key) if self.inputs is not None else dataset.load(key)

    def batches(self, items: Sequence[Any], fn: Any) -> Any:
        """``(batch, fn(batch) as a list, or the exception it raised)`` over ``items`` in batches of the job's
        size; a batch that runs out of memory is halved and tried again (``countboard.batching``)."""
        for batch, out in self.batching.batches(items, fn):
            self.batch_size = self.batching.size
            yield batch, out

    def isolated(self, items: Sequence[Any], fn: Any, reraise: tuple[type[BaseException], ...] = ()) -> Any:
        """:meth:`batches`, except that a batch whose call fails is run again item by item: ``(batch, outputs)``
        where each output is the item's result or the exception its own call raised, so that a failure stays with
        its item. An exception of a ``reraise`` type is raised instead (a problem every item would share)."""
        for batch, out in self.batches(items, fn):
            if isinstance(out, reraise):
                raise out
            if isinstance(out, Exception):
                out = [_alone(fn, item, reraise) for item in batch] if len(batch) > 1 else [out]
            yield batch, out


@dataclass
class TaskResult:
    """Everything a task logs at the end of a job.

    ``tables`` go to ``tables/<name>.parquet``, ``figures`` (matplotlib figures or PNG bytes) to
    ``figures/<name>.png``, ``arrays`` to ``arrays/<name>.npz``, ``files`` (local paths) to ``files/<name>``.
    """

    metrics: dict[str, float]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


class Task(ABC):
    """Base class of every task. Subclasses set ``name`` and ``family`` (a family of ``countboard.schema``).

    Every constructor parameter is part of the run's protocol (``countboard.protocol``: runs of one model and
    dataset with different protocols are different leaderboard entries) unless ``operational_params`` lists it with
    the reason it does not change what is measured; ``path_params`` are paths on one machine (their file name
    counts); ``protocol_defaults`` gives the defaults of nested mappings (``{"human.source": "simulated"}``).
    """

    name: str = ""
    family: str = ""
    operational_params: dict[str, str] = {}
    path_params: tuple[str, ...] = ()
    protocol_defaults: dict[str, Any] = {}

    @abstractmethod
    def units(self, model: Any, dataset: Any, ctx: RunContext) -> Sequence[str]:
        """Stable ids of the units to evaluate, in a fixed order."""

    def input_keys(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[str] | None:
        """The keys ``run_units(unit_ids)`` reads with ``ctx.load``, in order; None: it reads nothing ahead."""
        return None

    @abstractmethod
    def run_units(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        """One flat record per unit id (with ``unit_id``; ``error`` instead of results on failure)."""

    @abstractmethod
    def summarize(self, records: pd.DataFrame, model: Any, dataset: Any, ctx: RunContext) -> TaskResult:
        """Metrics and artifacts from the successful records."""


def _alone(fn: Any, item: Any, reraise: tuple[type[BaseException], ...]) -> Any:
    """``fn([item])[0]``, or the exception it raised (one of ``reraise`` propagates)."""
    try:
        return list(fn([item]))[0]
    except reraise:
        raise
    except Exception as exc:
        return exc
