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

Model outputs are checked here, once for every task: the record fields a task names in ``model_outputs`` (counts,
scores, sums of maps) must be finite, and a record with a NaN or an infinity there becomes a failed unit with the
reason (``check_outputs``, called by the engine before the records are checkpointed). Metrics are never logged
as NaN or infinite: ``split_metrics`` sets those apart as missing, each with its reason (the task's, from
``TaskResult.missing``, else what the value was), which the engine records in the run's ``missing_metrics`` tag.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
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
    on_queued: Any = None  # the engine's write of the previous units' checkpoint, run once by ``queued``

    def __post_init__(self) -> None:
        if self.batching is None:
            self.batching = Batching(self.batch_size, self.device)
        self.batch_size = self.batching.size

    def queued(self) -> None:
        """Say that this call's first device work is queued: the host work the engine has waiting (the previous
        units' checkpoint) runs now, while the device computes. Only the first call of a ``run_units`` does
        anything."""
        pending, self.on_queued = self.on_queued, None
        if pending is not None:
            pending()

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
    missing: dict[str, str] = field(default_factory=dict)  # metric key -> why it cannot be computed here


class Task(ABC):
    """Base class of every task. Subclasses set ``name`` and ``family`` (a family of ``countboard.schema``).

    Every constructor parameter is part of the run's protocol (``countboard.protocol``: runs of one model and
    dataset with different protocols are different leaderboard entries) unless ``operational_params`` lists it with
    the reason it does not change what is measured; ``path_params`` are paths on one machine (their file name
    counts); ``protocol_defaults`` gives the defaults of nested mappings (``{"human.source": "simulated"}``).

    ``model_outputs`` names the record fields that hold the model's outputs (a record with a non-finite value
    there fails: ``check_outputs``); ``model_kinds`` and ``dataset_kinds`` the kinds of model and dataset the task
    takes (the ``kind`` of their config nodes; empty: any), checked before any run exists (``countboard.fit``), and
    ``node_kinds`` those of model nodes inside its own config (``{"evaluator": ("counter",)}``). A classmethod
    ``preflight(node)``, where a task has one, checks its resolved config node before any run exists (raising
    ``ConfigError``), as a model's does.

    ``writes_while_queued``: the task calls ``ctx.queued()`` in ``run_units`` once it has queued its first device
    work, and the engine writes the previous units' checkpoint then, while the device computes (otherwise the
    checkpoint is written before ``run_units`` is called).
    """

    name: str = ""
    family: str = ""
    model_outputs: tuple[str, ...] = ()
    model_kinds: tuple[str, ...] = ()
    dataset_kinds: tuple[str, ...] = ()
    node_kinds: dict[str, tuple[str, ...]] = {}
    operational_params: dict[str, str] = {}
    path_params: tuple[str, ...] = ()
    protocol_defaults: dict[str, Any] = {}
    writes_while_queued: bool = False

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


def _first_nonfinite(value: Any) -> str | None:
    """``"nan"``, ``"inf"`` or ``"-inf"`` for the first non-finite number in ``value`` (a number, an array or
    nested lists), with its position in a sequence; None when every number is finite (text and bytes are skipped)."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        return None
    if isinstance(value, (int, float, np.number)):
        return None if math.isfinite(float(value)) else str(float(value))
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        bad = ~np.isfinite(value)
        if bad.any():
            index = np.unravel_index(int(np.argmax(bad)), value.shape)
            return f"{value[index]} at {list(map(int, index)) if value.ndim > 1 else int(index[0])}"
        return None
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (int, float, np.number)):
        try:  # a flat list of numbers: checked at once
            return _first_nonfinite(np.asarray(value, dtype=np.float64))
        except (TypeError, ValueError):
            pass
    if isinstance(value, (list, tuple, np.ndarray)):
        for k, item in enumerate(value):
            found = _first_nonfinite(item)
            if found is not None:
                return found if " at " in found else f"{found} at {k}"
    return None


def check_outputs(records: Sequence[dict], fields: Sequence[str]) -> list[dict]:
    """``records`` with each record whose model-output ``fields`` hold a NaN or an infinity replaced by a failed
    record naming the field, the value and its position (the engine counts it in ``n_failed_samples``, lists it in
    ``failures.json`` and the next run of the cell computes it again).

    Example:
        >>> check_outputs([{"unit_id": "a", "counts": [1.0, float("nan")]}, {"unit_id": "b", "counts": [2.0]}],
        ...               ["counts"])[0]["error"]
        'the model returned a non-finite counts (nan at 1); the unit is failed and retried by the next run'
    """
    out = []
    for record in records:
        if not record.get("error"):
            for key in fields:
                found = _first_nonfinite(record.get(key))
                if found is not None:
                    record = {"unit_id": record.get("unit_id"),
                              "error": f"the model returned a non-finite {key} ({found}); the unit is failed and "
                                       "retried by the next run"}
                    break
        out.append(record)
    return out


def split_metrics(metrics: Mapping[str, Any], reasons: Mapping[str, str], n_units: int
                  ) -> tuple[dict[str, float], dict[str, str]]:
    """``(finite, missing)``: the metrics that can be logged, as floats, and the others (NaN, infinite, None) with
    why each is missing: the task's reason from ``reasons``, else what the value was on the ``n_units`` units.

    Example:
        >>> split_metrics({"mae": 1.5, "mape": float("inf"), "nmn": float("nan")}, {"nmn": "no image above 0"}, 3)
        ({'mae': 1.5}, {'mape': 'infinite (inf) on the 3 units that succeeded', 'nmn': 'no image above 0'})
    """
    finite, missing = {}, {}
    for key, value in metrics.items():
        number = float("nan") if value is None else float(value)
        if math.isfinite(number):
            finite[key] = number
        else:
            what = "undefined (NaN)" if math.isnan(number) else f"infinite ({number})"
            missing[key] = reasons.get(key) or f"{what} on the {n_units} units that succeeded"
    missing.update({k: v for k, v in reasons.items() if k not in finite and k not in missing})
    return finite, missing


def missing_text(missing: Mapping[str, str]) -> str:
    """The ``missing_metrics`` tag's value: ``key: reason`` pairs, ``; `` apart, within MLflow's tag length."""
    return "; ".join(f"{k}: {v}" for k, v in sorted(missing.items()))[:5000]
