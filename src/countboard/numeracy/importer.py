"""GeckoNum's human study as results: log's human study as one MLflow run per (generator, task).

Each run is tagged ``model=<generator>``, ``model_kind=generator``, ``task=geckonum_human_t<n>``,
``dataset=geckonum``, ``family=generators`` and a ``config_hash`` of the input files and scoring options, so that
importing the same files again is skipped. Metrics are those of ``geckonum_summary``; per-unit scores go to
``samples.parquet``, breakdowns to ``tables/*.parquet``, the Task 1 number confusion matrix also to
``figures/number_confusion.png``, and the rows left out to ``problems.json``.

The command is ``countboard import-geckonum`` (``countboard.commands.import_geckonum``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from countboard.errors import CountboardError
from countboard.fingerprint import path_fingerprint
from countboard.numeracy.release import (
    GENERATORS,
    annotation_digests,
    list_annotation_files,
    read_annotations,
    read_prompts,
)
from countboard.numeracy.scoring import ImportProblem, score_annotations
from countboard.numeracy.summary import confusion_figure, summarize_units
from countboard.processes import pid_alive
from countboard.tracking import tags as tg
from countboard.tracking.datasets import DatasetRef
from countboard.tracking.experiments import DEFAULT_PATTERN
from countboard.tracking.tags import RunTags

log = logging.getLogger("countboard")

DATASET = "geckonum"
FAMILY = "generators"
#: Bump when scoring changes, so that a re-import logs new runs instead of skipping.
SCORING_VERSION = "2"
#: Tags naming the process that logs an imported run, so that a later import can tell a killed one.
HOST_TAG, PID_TAG = tg.IMPORT_HOST, tg.IMPORT_PID
#: MLflow run statuses (as ``countboard.tracking`` spells them; not imported here, to keep mlflow out of imports).
FINISHED, RUNNING, KILLED = "FINISHED", "RUNNING", "KILLED"
#: Age after which a RUNNING imported run of another host (or without owner tags) counts as abandoned.
STALE_AFTER_S = 600


def task_name(task: int) -> str:
    """The ``task`` tag of imported human-study runs, e.g. ``geckonum_human_t1``."""
    return f"geckonum_human_t{task}"


@dataclass
class ImportOptions:
    """How to score the annotations (all of it goes into ``config_hash``)."""

    tasks: Sequence[int] = (1, 2, 3)
    generators: Sequence[str] | None = None
    ties: str = "first"
    ranges: str = "up"
    n_boot: int = 2000
    n_perm: int = 1000
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
    #: Runs left RUNNING by a killed import, now ended (KILLED).
    ended: list[str] = field(default_factory=list)
    #: (generator, task) being logged by another live import, skipped.
    busy: list[tuple[str, str]] = field(default_factory=list)


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
            "ranges": opts.ranges,
            "n_boot": opts.n_boot,
            "n_perm": opts.n_perm,
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
    problems = [ImportProblem(f, n, m) for f, n, m in prompts.attrs.get("bad_rows", [])]
    if not any(list_annotation_files(annotations, task) for task in opts.tasks):
        found = len(list_annotation_files(annotations))
        raise CountboardError(
            f"{annotations}: no task_<n>_<generator>.csv for task(s) {', '.join(map(str, opts.tasks))} "
            f"({found} annotation file(s) of other tasks there); pass the release's geckonum_annotations.zip "
            "or a folder holding its CSVs"
        )
    for task in opts.tasks:
        if not list_annotation_files(annotations, task):
            continue
        digests = annotation_digests(annotations, task)
        scored = score_annotations(
            read_annotations(annotations, task), prompts, task, allowed, opts.ties, opts.ranges
        )
        problems += scored.problems
        per_file = Counter(_generator_of_file(p.file) for p in scored.problems)
        for generator, units in scored.units.groupby("model", sort=True):
            summary = summarize_units(units, task, n_boot=opts.n_boot, seed=opts.seed, n_perm=opts.n_perm)
            files = sorted(f for f in digests if _generator_of_file(f) == generator)
            digest = ";".join(f"{f}={digests[f]}" for f in files)
            metrics = dict(summary.metrics)
            metrics["numeracy_n_skipped_rows"] = float(per_file.get(generator, 0))
            tags = RunTags(
                model=generator,
                model_kind="generator",
                task=task_name(task),
                dataset=DATASET,
                family=FAMILY,
                config_hash=_config_hash(digest, prompts_digest, generator, task, opts),
                source=tg.SOURCE_HUMAN_ANNOTATIONS,
            ).to_tags()
            params = {
                "annotations": str(Path(annotations).resolve()),
                "files": ",".join(files),
                "prompts": str(prompts_file.resolve()),
                "ties": opts.ties,
                "ranges": opts.ranges,
                "n_boot": opts.n_boot,
                "n_perm": opts.n_perm,
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


def _owner_alive(run, now_ms: float) -> bool:
    """Whether the import that created a RUNNING run may still be logging it.

    On this host the owner's pid is checked; elsewhere (or for runs without owner tags) a run is given
    ``STALE_AFTER_S`` seconds, far more than logging one run takes.
    """
    host, pid = run.tags.get(HOST_TAG), run.tags.get(PID_TAG, "")
    if host == socket.gethostname() and pid.isdigit():
        if int(pid) == os.getpid():
            return False  # this process logs runs one at a time: an earlier one of its own is not in progress
        return pid_alive(int(pid))
    return now_ms - float(run.start_time or 0) < STALE_AFTER_S * 1000


def _settle_twins(tracker, twins, report: ImportReport) -> bool:
    """End RUNNING twins left by a killed import (status KILLED); True when a live import still owns one."""
    busy = False
    now_ms = time.time() * 1000
    for twin in twins:
        if twin.status != RUNNING:
            continue
        if _owner_alive(twin, now_ms):
            busy = True
        else:
            tracker.set_status(twin.run_id, KILLED)
            report.ended.append(twin.run_id)
    return busy


def log_runs(runs: Iterable[ImportedRun], tracker, experiment: str, force: bool = False,
             datasets: Sequence[DatasetRef] = ()) -> ImportReport:
    """Log each run with ``tracker.log_complete_run``; runs with a finished twin (same ``config_hash``) are skipped.

    A twin left RUNNING by an import that was killed is ended (KILLED) and the run logged again; a twin that
    another live import is logging is left alone and the run skipped (``report.busy``).
    """
    report = ImportReport()
    seen: dict[str, list[str]] = {}  # family -> the experiments its twins may be in (``tracking.experiments``)
    owner = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    for run in runs:
        identity = RunTags.from_tags(run.tags)
        if identity.family not in seen:
            own = tracker.family_experiment_id(experiment, identity.family)
            seen[identity.family] = tracker.search_experiment_ids(experiment, own)
        twins = tracker.find_runs(seen[identity.family], {tg.CONFIG_HASH: identity.config_hash})
        if not force and any(r.status == FINISHED for r in twins):
            report.skipped.append((run.generator, identity.task))
            continue
        if _settle_twins(tracker, twins, report) and not force:
            report.busy.append((run.generator, identity.task))
            continue
        name = f"model={run.generator},dataset={DATASET},task={identity.task}"
        with tempfile.TemporaryDirectory() as tmp:
            _write_artifacts(run, Path(tmp))
            run_id = tracker.log_complete_run(
                experiment,
                name,
                {**run.tags, **owner},
                params=run.params,
                metrics=run.metrics,
                artifacts_dir=tmp,
                force=True,
                datasets=datasets,
            )
        report.logged.append((run.generator, identity.task, run_id))
    return report


def released_datasets(annotations: str | Path, prompts_path: str | Path) -> list[DatasetRef]:
    """The GeckoNum release an import was scored from, as MLflow tracks datasets: its human annotations and its
    prompts (digests: their fingerprints)."""
    prompts = Path(prompts_path).resolve()
    paths = {"annotations": Path(annotations).resolve(), "prompts": prompts if prompts.is_file() else
             prompts / "prompts.csv"}  # ``prompts.csv`` or its folder, as ``build_runs`` reads it
    return [DatasetRef(f"{DATASET}/{what}", path_fingerprint(path), str(path), "human_study")
            for what, path in paths.items() if path.exists()]


def import_geckonum(
    annotations: str | Path,
    prompts_path: str | Path,
    tracker,
    experiment: str = DEFAULT_PATTERN,
    opts: ImportOptions | None = None,
    force: bool = False,
) -> ImportReport:
    """Score and log the human study (see the module docstring); returns what was logged, skipped and left out.

    ``tracker`` may be a ``Tracker`` or a function returning one: it is then called only once the input has been
    read and scored, so that bad input creates no store.
    """
    runs, problems = build_runs(annotations, prompts_path, opts)
    tracker = tracker() if callable(tracker) else tracker
    tracker.check()
    report = log_runs(runs, tracker, experiment, force, released_datasets(annotations, prompts_path))
    report.problems = problems
    return report
