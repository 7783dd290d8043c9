"""``countboard compare``'s library: from the FINISHED cells of the compared tasks to one comparison run per
(task, dataset, classifier).

Each cell's BCC posterior of the pooled cell is ``Beta(a, b)`` (metrics ``bcc_alpha`` / ``bcc_beta``, else the
``all`` row of ``tables/bcc_cells.parquet``); the newest cell per generator enters the group. A comparison run has
tags ``countboard.role=comparison``, ``task``, ``dataset``, ``classifier``, ``family`` (that of the compared
cells: ``acs``, ``generator_autoeval``) and a ``config_hash`` over
the input run ids and end times (a second call with nothing new is skipped), and the artifacts
``tables/pairwise.parquet`` (``generator_a``, ``generator_b``, ``p_greater``), ``tables/generators.parquet`` (the
inputs) and ``figures/pairwise.png``. The tracker is passed in; MLflow is reached only through it.

Only complete runs are compared: a smoke run (tagged ``partial``) or a run with failed units (``n_failed_units``)
estimates its rate from part of the data, so it is left out (and counted in ``Comparison.n_left_out``). Cells of
different protocols (``countboard.protocol``: the human labels, a classifier's thresholds, ...) are never compared
with each other: the protocol is part of the group.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.errors import ConfigError
from countboard.protocol import DEFAULT_LABEL, of_run
from countboard.quantify.compare import generator_comparison, pairwise_heatmap, pairwise_long
from countboard.quantify.compared import ComparedTask
from countboard.tracking import tags as tg
from countboard.tracking.experiments import experiment_name
from countboard.tracking.tags import RunTags

log = logging.getLogger(__name__)

POOLED = "all"
CELLS_TABLE = "tables/bcc_cells.parquet"
CELL_COLUMNS = ["run_id", "end_time", "dataset", "classifier", "protocol", "generator", "a", "b"]


@dataclass(frozen=True)
class Comparison:
    """One group that was compared: its run (None when an identical comparison was already logged)."""

    task: str
    dataset: str
    classifier: str
    n_generators: int
    run_id: str | None
    protocol: str = DEFAULT_LABEL
    n_left_out: int = 0  # partial runs and runs with failed units of the group's dataset and classifier


def inputs_hash(task: str, dataset: str, classifier: str, cells: pd.DataFrame) -> str:
    """``config_hash`` of a comparison: the group and its input runs' ids and end times.

    Example:
        >>> cells = pd.DataFrame({"run_id": ["r2", "r1"], "end_time": [5, 3]})
        >>> inputs_hash("bcc", "d", "c", cells) == inputs_hash("bcc", "d", "c", cells.iloc[::-1])
        True
    """
    lines = sorted(f"{r}:{t}" for r, t in zip(cells["run_id"], cells["end_time"], strict=True))
    text = "\n".join(["comparison", task, dataset, classifier, *lines])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def latest_per_generator(cells: pd.DataFrame) -> pd.DataFrame:
    """One cell per generator of a group: the newest (largest ``end_time``) when a generator has several runs.

    Example:
        >>> c = pd.DataFrame({"generator": ["g", "g", "h"], "end_time": [1, 2, 1], "run_id": ["a", "b", "c"]})
        >>> latest_per_generator(c)["run_id"].tolist()
        ['b', 'c']
    """
    newest = cells.sort_values(["generator", "end_time"]).groupby("generator", sort=True).tail(1)
    return newest.sort_values("generator").reset_index(drop=True)


def _beta_params(tracker, run, tmp: Path) -> tuple[float, float] | None:
    """The pooled cell's BCC Beta(a, b) of ``run``: from its metrics, else from its ``bcc_cells`` table."""
    metrics = run.data.metrics
    if "bcc_alpha" in metrics and "bcc_beta" in metrics:
        return float(metrics["bcc_alpha"]), float(metrics["bcc_beta"])
    if CELLS_TABLE not in tracker.list_artifacts(run.info.run_id, "tables"):
        return None
    table = pd.read_parquet(tracker.download(run.info.run_id, CELLS_TABLE, tmp / run.info.run_id))
    pooled = table[table["cell"].astype(str) == POOLED]
    if pooled.empty or not {"bcc_alpha", "bcc_beta"} <= set(table.columns):
        return None
    a, b = float(pooled["bcc_alpha"].iloc[0]), float(pooled["bcc_beta"].iloc[0])
    return (a, b) if np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0 else None


def incomplete(tags: dict[str, str]) -> str | None:
    """Why a finished run is not complete (a smoke run, failed units), or None.

    Example:
        >>> incomplete({tg.PARTIAL: "true"}), incomplete({tg.N_FAILED_UNITS: "2"}), incomplete({tg.PARTIAL: "false"})
        ('partial', '2 failed units', None)
    """
    if str(tags.get(tg.PARTIAL, "")).lower() == "true":
        return "partial"
    try:
        failed = int(float(tags.get(tg.N_FAILED_UNITS) or 0))
    except ValueError:
        failed = 0
    return f"{failed} failed units" if failed else None


def read_cells(tracker, experiment_ids: str | list[str], spec: ComparedTask, tmp: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The complete FINISHED cells of ``spec.task`` with a BCC posterior (run_id, end_time, dataset, classifier,
    protocol, generator, a, b), and the incomplete ones left out (run_id, dataset, classifier, why)."""
    query = (f"tags.`{tg.TASK}` = '{spec.task}' AND tags.`{tg.ROLE}` = '{tg.ROLE_CELL}' "
             "AND attributes.status = 'FINISHED'")
    ids = [experiment_ids] if isinstance(experiment_ids, str) else list(experiment_ids)
    runs, token = [], None
    while True:  # every page: a lab's store holds more cells of a task than one page
        page = tracker.client.search_runs(ids, filter_string=query, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    rows, left_out = [], []
    for run in runs:
        tags = run.data.tags
        generator, classifier = tags.get(spec.generator_tag), tags.get(spec.classifier_tag)
        why = incomplete(tags)
        if why is not None:
            log.info("compare: run %s (%s) is %s; only complete runs are compared", run.info.run_id, spec.task, why)
            left_out.append({"run_id": run.info.run_id, "dataset": tags.get(tg.DATASET, ""),
                             "classifier": classifier, "why": why})
            continue
        params = _beta_params(tracker, run, tmp) if generator and classifier else None
        if params is None:
            log.info("compare: run %s (%s) has no generator/classifier tag or BCC posterior; skipped",
                     run.info.run_id, spec.task)
            continue
        rows.append({"run_id": run.info.run_id, "end_time": int(run.info.end_time or 0),
                     "dataset": tags.get(tg.DATASET, ""), "classifier": classifier,
                     "protocol": of_run(tags.get(tg.PROTOCOL), tags.get(tg.PROTOCOL_LABEL), run.data.params).label,
                     "generator": generator,
                     "a": params[0], "b": params[1]})
    return (pd.DataFrame(rows, columns=CELL_COLUMNS),
            pd.DataFrame(left_out, columns=["run_id", "dataset", "classifier", "why"]))


def log_comparison(tracker, experiment: str, task: str, dataset: str, classifier: str, cells: pd.DataFrame,
                   force: bool = False, protocol: str = DEFAULT_LABEL, family: str = "acs") -> str | None:
    """Log one comparison run of a group's cells (one per generator), tagged with the cells' ``family``; None when
    an identical one exists."""
    matrix = generator_comparison(cells.assign(classifier=classifier), classifier)
    tags = RunTags(role=tg.ROLE_COMPARISON, task=task, dataset=dataset, classifier=classifier, family=family,
                   config_hash=inputs_hash(task, dataset, classifier, cells), protocol_label=protocol).to_tags()
    with tempfile.TemporaryDirectory(prefix="countboard-compare-") as tmp:
        out = Path(tmp)
        (out / "tables").mkdir()
        (out / "figures").mkdir()
        pairwise_long(matrix).to_parquet(out / "tables" / "pairwise.parquet", index=False)
        cells[["generator", "run_id", "a", "b"]].to_parquet(out / "tables" / "generators.parquet", index=False)
        pairwise_heatmap(matrix, f"P(A > B) {task} / {dataset}\nclassifier {classifier}",
                         out / "figures" / "pairwise.png")
        params = {"generators": ",".join(cells["generator"]), "n_generators": len(cells),
                  "input_runs": ",".join(cells["run_id"])}
        name = f"compare {task} {dataset} {classifier}" + (f" {protocol}" if protocol != DEFAULT_LABEL else "")
        return tracker.log_complete_run(experiment, name, tags, params=params, artifacts_dir=out, force=force)


def compare_generators(tracker, experiment: str, tasks: Sequence[ComparedTask], classifier: str | None = None,
                       force: bool = False) -> list[Comparison]:
    """Log one comparison run per (task, dataset, classifier) of ``experiment`` with two or more generators.

    Args:
        tracker: An open store (``countboard.tracking.store.Tracker``).
        experiment: The experiment name or pattern (``countboard/{family}``): cells are read from every experiment
            it names (and the one experiment of older stores), comparisons logged in their family's.
        tasks: The compared tasks (each domain's ``COMPARED``).
        classifier: Only the cells judged by this classifier / evaluator.
        force: Log again even when an identical comparison exists.
    """
    tracker.check()
    found = tracker.search_experiment_ids(experiment)
    if not found:
        raise ConfigError(f"no experiment named by {experiment!r} in {tracker.uri}; run a sweep first or pass "
                          "--experiment")
    done = []
    with tempfile.TemporaryDirectory(prefix="countboard-compare-") as tmp:
        for spec in tasks:
            cells, left_out = read_cells(tracker, found, spec, Path(tmp))
            if classifier:
                cells = cells[cells["classifier"] == classifier]
            for (dataset, judge, protocol), group in cells.groupby(["dataset", "classifier", "protocol"], sort=True):
                group = latest_per_generator(group)
                if len(group) < 2:
                    log.info("compare: %s / %s / %s / %s has one generator; nothing to compare", spec.task, dataset,
                             judge, protocol)
                    continue
                run_id = log_comparison(tracker, experiment_name(experiment, spec.cells_family), spec.task,
                                        str(dataset), str(judge), group, force, str(protocol), spec.cells_family)
                n_out = int(((left_out["dataset"] == dataset) & (left_out["classifier"] == judge)).sum())
                done.append(Comparison(spec.task, str(dataset), str(judge), len(group), run_id, str(protocol), n_out))
    return done
