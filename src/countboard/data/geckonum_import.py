"""``countboard import-geckonum``: log GeckoNum's human study as one MLflow run per (generator, task).

Each run is tagged ``model=<generator>``, ``model_kind=generator``, ``task=geckonum_human_t<n>``,
``dataset=geckonum``, ``family=generators`` and a ``config_hash`` of the input files and scoring options, so that
importing the same files again is skipped. Metrics are those of ``geckonum_summary``; per-unit scores go to
``samples.parquet``, breakdowns to ``tables/*.parquet``, the Task 1 number confusion matrix also to
``figures/number_confusion.png``, and the rows left out to ``problems.json``.

Example:
    countboard import-geckonum data/geckonum/geckonum_annotations.zip --store mlruns
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from countboard.data.geckonum import (
    GENERATORS,
    annotation_digests,
    list_annotation_files,
    read_annotations,
    read_prompts,
)
from countboard.data.geckonum_scoring import ImportProblem, score_annotations
from countboard.data.geckonum_summary import confusion_figure, summarize_units
from countboard.errors import DataNotFoundError

log = logging.getLogger("countboard")

DATASET = "geckonum"
FAMILY = "generators"
#: Bump when scoring changes, so that a re-import logs new runs instead of skipping.
SCORING_VERSION = "1"


def task_name(task: int) -> str:
    """The ``task`` tag of imported human-study runs, e.g. ``geckonum_human_t1``."""
    return f"geckonum_human_t{task}"


@dataclass
class ImportOptions:
    """How to score the annotations (all of it goes into ``config_hash``)."""

    tasks: Sequence[int] = (1, 2, 3)
    generators: Sequence[str] | None = None
    ties: str = "any"
    n_boot: int = 2000
    seed: int = 0


@dataclass
class ImportedRun:
    """Everything one (generator, task) run logs."""

    generator: str
    task: int
    tags: dict[str, str]
    params: dict[str, Any]
    metrics: dict[str, float]
    tables: dict[str, pd.DataFrame]
    samples: pd.DataFrame
    problems: list[ImportProblem] = field(default_factory=list)


@dataclass
class ImportReport:
    """What ``import_geckonum`` did."""

    logged: list[tuple[str, str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    problems: list[ImportProblem] = field(default_factory=list)


def _generator_of_file(name: str) -> str:
    return Path(name).stem.split("_", 2)[2]


def _config_hash(digest: str, prompts_digest: str, generator: str, task: int, opts: ImportOptions) -> str:
    blob = json.dumps(
        {
            "files": digest,
            "prompts": prompts_digest,
            "generator": generator,
            "task": task,
            "ties": opts.ties,
            "n_boot": opts.n_boot,
            "seed": opts.seed,
            "scoring": SCORING_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_runs(
    annotations: str | Path, prompts_path: str | Path, opts: ImportOptions | None = None
) -> tuple[list[ImportedRun], list[ImportProblem]]:
    """Score every (generator, task) of the annotations; nothing is logged.

    Args:
        annotations: The release zip or a folder of ``task_<n>_<generator>.csv`` files.
        prompts_path: ``prompts.csv`` or its folder.
        opts: Tasks, allowed generator names (default: the seven of the study plus none), tie rule, bootstrap.

    Returns:
        The runs, and every row left out (file, line, why).
    """
    opts = opts or ImportOptions()
    prompts = read_prompts(prompts_path)
    prompts_file = Path(prompts_path) if Path(prompts_path).is_file() else Path(prompts_path) / "prompts.csv"
    prompts_digest = hashlib.sha256(prompts_file.read_bytes()).hexdigest()
    allowed = list(GENERATORS if opts.generators is None else opts.generators)
    runs: list[ImportedRun] = []
    problems: list[ImportProblem] = []
    for task in opts.tasks:
        if not list_annotation_files(annotations, task):
            continue
        digests = annotation_digests(annotations, task)
        scored = score_annotations(read_annotations(annotations, task), prompts, task, allowed, opts.ties)
        problems += scored.problems
        per_file = Counter(_generator_of_file(p.file) for p in scored.problems)
        for generator, units in scored.units.groupby("model", sort=True):
            summary = summarize_units(units, task, n_boot=opts.n_boot, seed=opts.seed)
            files = sorted(f for f in digests if _generator_of_file(f) == generator)
            digest = ";".join(f"{f}={digests[f]}" for f in files)
            metrics = dict(summary.metrics)
            metrics["numeracy_n_skipped_rows"] = float(per_file.get(generator, 0))
            tags = {
                "model": generator,
                "model_kind": "generator",
                "task": task_name(task),
                "dataset": DATASET,
                "family": FAMILY,
                "config_hash": _config_hash(digest, prompts_digest, generator, task, opts),
                "source": "human_annotations",
            }
            params = {
                "annotations": str(Path(annotations).resolve()),
                "files": ",".join(files),
                "prompts": str(prompts_file.resolve()),
                "ties": opts.ties,
                "n_boot": opts.n_boot,
                "seed": opts.seed,
                "scoring_version": SCORING_VERSION,
            }
            tables = {k: v for k, v in summary.tables.items() if k != "units"}
            gen_problems = [p for p in scored.problems if _generator_of_file(p.file) == generator]
            runs.append(
                ImportedRun(
                    generator, task, tags, params, metrics, tables, summary.tables["units"], gen_problems
                )
            )
    return runs, problems


def _write_artifacts(run: ImportedRun, root: Path) -> None:
    samples = run.samples.copy()
    for c in samples.columns:
        if samples[c].dtype == object or isinstance(samples[c].dtype, pd.CategoricalDtype):
            samples[c] = samples[c].astype(str)
    samples.to_parquet(root / "samples.parquet", index=False)
    (root / "tables").mkdir()
    for name, table in run.tables.items():
        table.to_parquet(root / "tables" / f"{name}.parquet", index=False)
    if "number_confusion" in run.tables:
        (root / "figures").mkdir()
        fig = confusion_figure(run.tables["number_confusion"], f"{run.generator}: numeric-simple prompts")
        fig.save(root / "figures" / "number_confusion.png")
    problems = [{"file": p.file, "line": p.line, "message": p.message} for p in run.problems]
    (root / "problems.json").write_text(json.dumps(problems, indent=1))


def log_runs(runs: Iterable[ImportedRun], tracker, experiment: str, force: bool = False) -> ImportReport:
    """Log each run with ``tracker.log_complete_run``; runs with a finished twin (same ``config_hash``) are skipped."""
    report = ImportReport()
    experiment_id = tracker.experiment_id(experiment)
    for run in runs:
        twins = tracker.find_runs(experiment_id, {"config_hash": run.tags["config_hash"]})
        if not force and any(r.status == "FINISHED" for r in twins):
            report.skipped.append((run.generator, run.tags["task"]))
            continue
        name = f"model={run.generator},dataset={DATASET},task={run.tags['task']}"
        with tempfile.TemporaryDirectory() as tmp:
            _write_artifacts(run, Path(tmp))
            run_id = tracker.log_complete_run(
                experiment,
                name,
                run.tags,
                params=run.params,
                metrics=run.metrics,
                artifacts_dir=tmp,
                force=True,
            )
        report.logged.append((run.generator, run.tags["task"], run_id))
    return report


def tracker_for_store(store: str | None):
    """A ``Tracker`` for ``--store`` (see ``countboard.tracking.store.open_store``; created if missing)."""
    from countboard.tracking.store import open_store

    return open_store(store, create=True)


def import_geckonum(
    annotations: str | Path,
    prompts_path: str | Path,
    tracker,
    experiment: str = "countboard",
    opts: ImportOptions | None = None,
    force: bool = False,
) -> ImportReport:
    """Score and log the human study (see the module docstring); returns what was logged, skipped and left out."""
    tracker.check()
    runs, problems = build_runs(annotations, prompts_path, opts)
    report = log_runs(runs, tracker, experiment, force)
    report.problems = problems
    return report


def _default_prompts(annotations: Path) -> Path:
    for candidate in (annotations.parent / "prompts.csv", annotations / "prompts.csv",
                      annotations.parent.parent / "prompts.csv"):  # fmt: skip
        if candidate.is_file():
            return candidate
    raise DataNotFoundError(
        annotations.parent / "prompts.csv",
        "--prompts",
        "Pass --prompts PATH/prompts.csv (it is published with the annotations).",
    )


def run_command(args) -> int:
    annotations = Path(args.path)
    prompts = Path(args.prompts) if args.prompts else _default_prompts(annotations)
    generators = None
    if args.allow_generator:
        generators = [*GENERATORS, *args.allow_generator]
    opts = ImportOptions(tasks=tuple(args.task or (1, 2, 3)), generators=generators, ties=args.ties,
                         n_boot=args.n_boot, seed=args.seed)  # fmt: skip
    start = time.perf_counter()
    report = import_geckonum(
        annotations, prompts, tracker_for_store(args.store), args.experiment, opts, args.force
    )
    for problem in report.problems[: args.show_problems]:
        print(f"skipped {problem}", file=sys.stderr)
    if len(report.problems) > args.show_problems:
        print(f"... and {len(report.problems) - args.show_problems} more skipped rows", file=sys.stderr)
    print(
        f"logged {len(report.logged)} run(s), skipped {len(report.skipped)} already imported, "
        f"left out {len(report.problems)} row(s) in {time.perf_counter() - start:.1f}s"
    )
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "import-geckonum",
        help="import GeckoNum human annotations: one run per (generator, task)",
        description="Score GeckoNum's human annotations as the paper does and log one MLflow run per "
        "(generator, task). Rows that cannot be used are reported with file and line; the rest is imported.",
    )
    p.add_argument("path", help="geckonum_annotations.zip, or a folder of task_<n>_<generator>.csv files")
    p.add_argument("--prompts", default=None, help="prompts.csv (default: beside PATH)")
    p.add_argument("--store", default=None,
                   help="MLflow store: a URI, a store directory or its mlflow.db (default: $MLFLOW_TRACKING_URI, "
                        "else ./mlruns)")  # fmt: skip
    p.add_argument("--experiment", default="countboard", help="MLflow experiment (default: countboard)")
    p.add_argument("--task", type=int, action="append", choices=(1, 2, 3), help="only this task (repeatable)")
    p.add_argument("--allow-generator", action="append", metavar="NAME",
                   help="accept a generator name besides the seven of the study (repeatable)")  # fmt: skip
    p.add_argument("--ties", choices=("any", "lowest", "none"), default="any",
                   help="how a tied mode is scored (see docs/geckonum.md; default: any)")  # fmt: skip
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples for the 95%% interval")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--force", action="store_true", help="log again even if an identical import exists")
    p.add_argument("--show-problems", type=int, default=20, help="skipped rows to print (default: 20)")
    p.set_defaults(func=run_command)
