"""Speed of ``countboard import-geckonum`` on the full GeckoNum release (479,570 annotation rows).

Target: the whole import in at most 20 s on 2 cores. Phases are timed side by side in one run:

1. read: the three tasks' CSVs from the zip (``read_annotations``);
2. parse + score + summarise: ``build_runs`` (reads again, so it includes phase 1), 21 runs' metrics and tables;
3. log: the 21 runs into a fresh MLflow store (tracker creation, i.e. the SQLite schema, timed apart);
4. re-import: the same files again, all 21 runs skipped by ``config_hash``;
5. the subcommand end to end in a fresh Python process (start-up and imports included), into another fresh
   store.

A naive baseline (pandas ``read_csv`` with default options, a Python loop that parses each answer and takes
``statistics.multimode`` per image-question pair) is timed on Task 1 for the speed-up ratio of phase 2.

Run: ``python benchmarks/geckonum_import.py [--data DIR] [--no-baseline]``
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pandas as pd

from countboard.data.geckonum import read_annotations
from countboard.data.geckonum_answers import parse_count_answer
from countboard.data.geckonum_import import build_runs, log_runs, tracker_for_store

TARGET_S = 20.0
# The subcommand as ``countboard`` registers it, without the other subcommands' imports.
CLI_CODE = (
    "import argparse, sys; from countboard.data.geckonum_import import register; "
    "p = argparse.ArgumentParser(); register(p.add_subparsers()); a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))"
)


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def naive_task1(zip_path: Path) -> int:
    """Task 1 labels the straightforward way, to compare against."""
    with zipfile.ZipFile(zip_path) as zf:
        frames = [pd.read_csv(io.BytesIO(zf.read(n))) for n in zf.namelist() if n.startswith("task_1_")]
    df = pd.concat(frames)
    df["value"] = [parse_count_answer(a) for a in df["raw_answer"]]
    labels = {}
    for key, group in df.groupby(["model", "image_id", "question_id"]):
        labels[key] = min(statistics.multimode(group["value"].tolist()))
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
    args = p.parse_args()
    zip_path, prompts = args.data / "geckonum_annotations.zip", args.data / "prompts.csv"
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

    n_rows, t_read = _timed(lambda: sum(len(read_annotations(zip_path, t)) for t in (1, 2, 3)))
    (runs, problems), t_build = _timed(lambda: build_runs(zip_path, prompts))
    with tempfile.TemporaryDirectory() as tmp:
        tracker, t_tracker = _timed(lambda: tracker_for_store(tmp))
        _, t_check = _timed(tracker.check)
        report, t_log = _timed(lambda: log_runs(runs, tracker, "countboard"))
        again, t_again = _timed(lambda: log_runs(build_runs(zip_path, prompts)[0], tracker, "countboard"))
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", CLI_CODE, "import-geckonum", str(zip_path), "--prompts", str(prompts),
               "--store", tmp]  # fmt: skip
        proc, t_cli = _timed(lambda: subprocess.run(cmd, capture_output=True, text=True))
    cli_ok = proc.returncode == 0
    print(f"rows: {n_rows}, runs built: {len(runs)}, rows left out: {len(problems)}")
    print(f"read 3 tasks from the zip:         {t_read:6.2f} s")
    print(f"parse + score + summarise (21):    {t_build:6.2f} s   ratio to target {t_build / TARGET_S:.2f}")
    print(f"tracker for a fresh store:         {t_tracker + t_check:6.2f} s   (SQLite schema creation)")
    print(f"log {len(report.logged)} runs:                      {t_log:6.2f} s")
    print(f"re-import (build + {len(again.skipped)} skipped):     {t_again:6.2f} s")
    total = t_build + t_tracker + t_check + t_log
    print(f"in-process total (build+store+log): {total:6.2f} s   ratio to target {total / TARGET_S:.2f}")
    status = "ok" if cli_ok else f"FAILED rc={proc.returncode}: {proc.stderr[-500:]}"
    print(
        f"CLI end to end (fresh process):    {t_cli:6.2f} s   ratio to target {t_cli / TARGET_S:.2f} ({status})"
    )
    if not args.no_baseline:
        n_labels, t_naive = _timed(lambda: naive_task1(zip_path))
        t1_fast = _timed(lambda: build_runs(zip_path, prompts, _task1_only()))[1]
        print(f"Task 1 naive baseline ({n_labels} labels): {t_naive:6.2f} s; fast Task 1 build {t1_fast:.2f} s; "
              f"speed-up {t_naive / t1_fast:.1f}x")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def _task1_only():
    from countboard.data.geckonum_import import ImportOptions

    return ImportOptions(tasks=(1,))


if __name__ == "__main__":
    main()
