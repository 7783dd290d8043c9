"""``countboard compare``: pairwise ``P(generator A > generator B)`` for one classifier, logged as a run.

Reads the FINISHED cells of the BCC tasks from the store, takes each cell's BCC posterior ``Beta(a, b)`` of the
pooled cell (metrics ``bcc_alpha`` / ``bcc_beta``, else the ``all`` row of ``tables/bcc_cells.parquet``), groups the
cells by (task, dataset, classifier) and logs one run per group with tags ``countboard.role=comparison``, ``task``,
``dataset``, ``classifier``, ``family=acs`` and a ``config_hash`` over the input run ids and end times, so that a
second call with no new or changed cell is skipped. Artifacts: ``tables/pairwise.parquet`` (long form:
``generator_a``, ``generator_b``, ``p_greater`` = ``P(p_a > p_b)``), ``tables/generators.parquet`` (the inputs)
and ``figures/pairwise.png`` (heatmap).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.commands import store_argument
from countboard.errors import ConfigError

log = logging.getLogger(__name__)

POOLED = "all"
CELLS_TABLE = "tables/bcc_cells.parquet"


@dataclass(frozen=True)
class TaskSpec:
    """Which run tags name the generator and the classifier of a task's cells."""

    generator_tag: str
    classifier_tag: str


#: The tasks whose cells carry a BCC posterior.
TASKS = {
    "bcc": TaskSpec(generator_tag="generator", classifier_tag="model"),
    "text_acs": TaskSpec(generator_tag="model", classifier_tag="classifier"),
    "geckonum_autoeval": TaskSpec(generator_tag="model", classifier_tag="evaluator"),
}


def pairwise_long(matrix: pd.DataFrame) -> pd.DataFrame:
    """The off-diagonal entries of a square ``P(row > column)`` matrix as rows (generator_a, generator_b, p_greater).

    Example:
        >>> m = pd.DataFrame([[np.nan, 0.7], [0.3, np.nan]], index=["x", "y"], columns=["x", "y"])
        >>> pairwise_long(m).values.tolist()
        [['x', 'y', 0.7], ['y', 'x', 0.3]]
    """
    rows = [{"generator_a": str(a), "generator_b": str(b), "p_greater": float(matrix.loc[a, b])}
            for a in matrix.index for b in matrix.columns if a != b]
    return pd.DataFrame(rows, columns=["generator_a", "generator_b", "p_greater"])


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


def read_cells(tracker, experiment_id: str, task: str, tmp: Path) -> pd.DataFrame:
    """The FINISHED cells of ``task`` with a BCC posterior: run_id, end_time, dataset, classifier, generator, a, b."""
    spec = TASKS[task]
    query = f"tags.task = '{task}' AND tags.`countboard.role` = 'cell' AND attributes.status = 'FINISHED'"
    runs = tracker.client.search_runs([experiment_id], filter_string=query, max_results=5000)
    rows = []
    for run in runs:
        tags = run.data.tags
        generator, classifier = tags.get(spec.generator_tag), tags.get(spec.classifier_tag)
        params = _beta_params(tracker, run, tmp) if generator and classifier else None
        if params is None:
            log.info("compare: run %s (%s) has no generator/classifier tag or BCC posterior; skipped",
                     run.info.run_id, task)
            continue
        rows.append({"run_id": run.info.run_id, "end_time": int(run.info.end_time or 0),
                     "dataset": tags.get("dataset", ""), "classifier": classifier, "generator": generator,
                     "a": params[0], "b": params[1]})
    return pd.DataFrame(rows, columns=["run_id", "end_time", "dataset", "classifier", "generator", "a", "b"])


def heatmap(matrix: pd.DataFrame, title: str, path: Path) -> None:
    """Write the ``P(row > column)`` matrix as an annotated PNG heatmap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix_values, n = matrix.to_numpy(float), len(matrix)
    fig, ax = plt.subplots(figsize=(max(4.5, 2.5 + 0.6 * n), max(3.5, 2 + 0.5 * n)))
    im = ax.imshow(matrix_values, vmin=0, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(n), matrix.columns, rotation=45, ha="right")
    ax.set_yticks(range(n), matrix.index)
    ax.set_xlabel("generator B")
    ax.set_ylabel("generator A")
    for i in range(n):
        for j in range(n):
            if i != j:
                ax.text(j, i, f"{matrix_values[i, j]:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label="P(A > B)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def log_comparison(tracker, experiment: str, task: str, dataset: str, classifier: str, cells: pd.DataFrame,
                   force: bool = False) -> str | None:
    """Log one comparison run of a group's cells (one per generator); None when an identical one exists."""
    from countboard.quantify.compare import generator_comparison  # PyMC: imported when a comparison runs

    matrix = generator_comparison(cells.assign(classifier=classifier), classifier)
    tags = {"countboard.role": "comparison", "task": task, "dataset": dataset, "classifier": classifier,
            "family": "acs", "config_hash": inputs_hash(task, dataset, classifier, cells)}
    with tempfile.TemporaryDirectory(prefix="countboard-compare-") as tmp:
        out = Path(tmp)
        (out / "tables").mkdir()
        (out / "figures").mkdir()
        pairwise_long(matrix).to_parquet(out / "tables" / "pairwise.parquet", index=False)
        cells[["generator", "run_id", "a", "b"]].to_parquet(out / "tables" / "generators.parquet", index=False)
        heatmap(matrix, f"P(A > B) {task} / {dataset}\nclassifier {classifier}", out / "figures" / "pairwise.png")
        params = {"generators": ",".join(cells["generator"]), "n_generators": len(cells),
                  "input_runs": ",".join(cells["run_id"])}
        return tracker.log_complete_run(experiment, f"compare {task} {dataset} {classifier}", tags, params=params,
                                        artifacts_dir=out, force=force)


def run_compare(args: argparse.Namespace) -> int:
    from countboard.tracking.store import open_store

    tasks = list(TASKS) if args.task == "all" else [args.task]
    tracker = open_store(args.store)
    tracker.check()
    experiment = tracker.client.get_experiment_by_name(args.experiment)
    if experiment is None:
        raise ConfigError(f"experiment {args.experiment!r} not found in {tracker.uri}; run a sweep first or pass "
                          "--experiment")
    logged = skipped = 0
    with tempfile.TemporaryDirectory(prefix="countboard-compare-") as tmp:
        for task in tasks:
            cells = read_cells(tracker, experiment.experiment_id, task, Path(tmp))
            if args.classifier:
                cells = cells[cells["classifier"] == args.classifier]
            for (dataset, classifier), group in cells.groupby(["dataset", "classifier"], sort=True):
                group = latest_per_generator(group)
                if len(group) < 2:
                    log.info("compare: %s / %s / %s has one generator; nothing to compare", task, dataset,
                             classifier)
                    continue
                run_id = log_comparison(tracker, args.experiment, task, str(dataset), str(classifier), group,
                                        args.force)
                logged, skipped = logged + (run_id is not None), skipped + (run_id is None)
                print(f"{task} / {dataset} / {classifier}: {len(group)} generators, "
                      + (f"logged run {run_id}" if run_id else "unchanged, skipped"))
    print(f"compare: {logged} comparison run(s) logged, {skipped} unchanged")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="log pairwise P(generator A > B) per classifier from the BCC cells",
                              description="Read the FINISHED cells of the BCC tasks and log one comparison run per "
                                          "(task, dataset, classifier): P(A > B) for every pair of generators.")
    store_argument(p)
    p.add_argument("--experiment", default="countboard", help="experiment to read and log to")
    p.add_argument("--task", choices=[*TASKS, "all"], default="all", help="which task's cells to compare")
    p.add_argument("--classifier", default=None, help="only the cells judged by this classifier / evaluator")
    p.add_argument("--force", action="store_true", help="log again even if an identical comparison exists")
    p.set_defaults(func=run_compare)
