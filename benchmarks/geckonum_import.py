"""Speed of ``countboard import-geckonum`` on the full GeckoNum release (479,570 annotation rows).

Target: the whole import in at most 20 s on 2 cores. Phases are timed side by side in one run:

1. read: the three tasks' CSVs from the zip (``read_annotations``);
2. parse + score + summarise: ``build_runs`` (reads again, so it includes phase 1), 21 runs' metrics and tables;
3. log: the 21 runs into a fresh MLflow store (tracker creation, i.e. the SQLite schema, timed apart);
4. re-import: the same files again, all 21 runs skipped by ``config_hash``;
5. the subcommand end to end in a fresh Python process (start-up and imports included), into another fresh
   store.

A naive baseline (pandas ``read_csv`` with default options, a Python loop that parses each answer, rounds it up
and takes ``statistics.mode`` per image-question pair: the paper's rule) is timed on Task 1 for the speed-up ratio
of phase 2.

Run: ``python benchmarks/geckonum_import.py [--data DIR] [--no-baseline] [--quick]`` (``--quick``: Tasks 2 and 3
only, no baseline, no fresh process).
"""

from __future__ import annotations

import argparse
import io
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pandas as pd

from countboard.numeracy.answers import parse_count_answer
from countboard.numeracy.importer import ImportOptions, build_runs, log_runs
from countboard.numeracy.release import read_annotations
from countboard.tracking.store import open_store

TARGET_S = 20.0
# The subcommand as ``countboard`` registers it, without the other subcommands' imports.
CLI_CODE = (
    "import argparse, sys; from countboard.commands.import_geckonum import register; "
    "p = argparse.ArgumentParser(); register(p.add_subparsers()); a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))"
)


CPU: dict[str, float] = {}


def _timed(fn, label: str | None = None):
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    if label:
        CPU[label] = time.process_time() - cpu
    return out, time.perf_counter() - start


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def naive_task1(zip_path: Path) -> int:
    """Task 1 labels the straightforward way, to compare against."""
    with zipfile.ZipFile(zip_path) as zf:
        frames = [pd.read_csv(io.BytesIO(zf.read(n))) for n in zf.namelist() if n.startswith("task_1_")]
    df = pd.concat(frames)
    df["value"] = [math.ceil(parse_count_answer(a)) for a in df["raw_answer"]]
    labels = {}
    for key, group in df.groupby(["model", "image_id", "question_id"], sort=False):
        labels[key] = statistics.mode(group["value"].tolist())  # the first-given of tied answers
    return len(labels)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(
        os.environ.get("COUNTBOARD_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
    )
    p.add_argument(
        "--data", type=Path, default=default / "geckonum", help="folder with the zip and prompts.csv"
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the naive baseline")
    p.add_argument("--quick", action="store_true", help="Tasks 2 and 3 only, no baseline, no fresh process")
    args = p.parse_args()
    zip_path, prompts = args.data / "geckonum_annotations.zip", args.data / "prompts.csv"
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    tasks = (2, 3) if args.quick else (1, 2, 3)
    opts = ImportOptions(tasks=tasks)

    n_rows, t_read = _timed(lambda: sum(len(read_annotations(zip_path, t)) for t in tasks), "read")
    (runs, problems), t_build = _timed(lambda: build_runs(zip_path, prompts, opts), "build")
    with tempfile.TemporaryDirectory() as tmp:
        tracker, t_tracker = _timed(lambda: open_store(tmp, create=True), "tracker")
        _, t_check = _timed(tracker.check, "check")
        report, t_log = _timed(lambda: log_runs(runs, tracker, "countboard"), "log")
        again, t_again = _timed(
            lambda: log_runs(build_runs(zip_path, prompts, opts)[0], tracker, "countboard"), "again"
        )
    if args.quick:
        _report(len(runs), n_rows, problems, [
            ("read the tasks from the zip", t_read, CPU["read"]),
            (f"parse + score + summarise ({len(runs)} runs)", t_build, CPU["build"]),
            (f"log {len(report.logged)} runs", t_log, CPU["log"]),
        ])  # fmt: skip
        return
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", CLI_CODE, "import-geckonum", str(zip_path), "--prompts", str(prompts),
               "--store", tmp]  # fmt: skip
        cpu0 = _children_cpu()
        proc, t_cli = _timed(lambda: subprocess.run(cmd, capture_output=True, text=True))
        CPU["cli"] = _children_cpu() - cpu0
    cli_ok = proc.returncode == 0
    rows = [
        ("read 3 tasks from the zip", t_read, CPU["read"]),
        ("parse + score + summarise (21 runs)", t_build, CPU["build"]),
        ("tracker for a fresh store (schema)", t_tracker + t_check, CPU["tracker"] + CPU["check"]),
        (f"log {len(report.logged)} runs", t_log, CPU["log"]),
        (f"re-import (build + {len(again.skipped)} skipped)", t_again, CPU["again"]),
        ("in-process total (build+store+log)", t_build + t_tracker + t_check + t_log,
         CPU["build"] + CPU["tracker"] + CPU["check"] + CPU["log"]),
        ("subcommand end to end (fresh process)", t_cli, CPU["cli"]),
    ]  # fmt: skip
    _report(len(runs), n_rows, problems, rows)
    if not cli_ok:
        print(f"subcommand FAILED rc={proc.returncode}: {proc.stderr[-500:]}")
    if not args.no_baseline:
        n_labels, t_naive = _timed(lambda: naive_task1(zip_path), "naive")
        t1_fast = _timed(lambda: build_runs(zip_path, prompts, _task1_only()), "fast1")[1]
        print(f"Task 1 naive baseline ({n_labels} labels): {t_naive:.2f} s wall, {CPU['naive']:.2f} s cpu; "
              f"build_runs Task 1: {t1_fast:.2f} s wall, {CPU['fast1']:.2f} s cpu; "
              f"speed-up {t_naive / t1_fast:.1f}x wall, {CPU['naive'] / CPU['fast1']:.1f}x cpu")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def _report(n_runs: int, n_rows: int, problems, rows) -> None:
    print(f"rows: {n_rows}, runs built: {n_runs}, rows left out: {len(problems)}")
    print(f"{'phase':40s} {'wall s':>7s} {'cpu s':>7s} {'wall/target':>11s}")
    for name, wall, cpu in rows:
        print(f"{name:40s} {wall:7.2f} {cpu:7.2f} {wall / TARGET_S:11.2f}")


def _task1_only():
    return ImportOptions(tasks=(1,))


if __name__ == "__main__":
    main()
