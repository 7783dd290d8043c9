"""``countboard demo``: the offline demo — train, sweep ``experiment=demo``, import GeckoNum, index, explain.

Each step is skipped when its result is already in the store, so a second ``make demo`` is quick and a failed one
resumes where it stopped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from countboard.errors import ConfigError, CountboardError


def _step(title: str) -> float:
    print(f"\n== {title}", flush=True)
    return time.time()


def _call(cmd: list[str]) -> None:
    proc = subprocess.run(cmd)
    if proc.returncode != 0:
        raise CountboardError(f"demo step failed ({proc.returncode}): {' '.join(cmd)}; rerun `make demo` to resume "
                              "(finished cells are skipped)")


def run(args: argparse.Namespace) -> int:
    from countboard.cli import main as cli_main
    from countboard.resources import GECKONUM_DIR
    from countboard.tracking.address import DEFAULT_STORE, STORE_ENV, parse

    where = parse(args.store or os.environ.get(STORE_ENV) or DEFAULT_STORE)
    if where.folder is None:
        raise ConfigError(f"the demo writes an embedded store: give --store a folder, not {where.given!r}")
    store = where.folder
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.time()
    steps = [
        ("train the shapecount counters (naive and aware recipes)",
         [sys.executable, "-m", "countboard.cli", "train-counter", "--recipe", "both", "--store", str(store)]),
        ("sweep conf/experiment/demo.yaml into the embedded MLflow store",
         [sys.executable, "-m", "countboard.commands.sweep", "experiment=demo", f"tracking.store_dir={store}",
          f"hydra.launcher.n_jobs={args.jobs}"] + (["progress=false"] if not sys.stdout.isatty() else [])),
    ]
    for title, cmd in steps:
        if title:
            _step(title)
        _call(cmd)
    _step("import the GeckoNum human study (7 generators, bundled CC-BY 4.0 release)")
    if cli_main(["import-geckonum", str(GECKONUM_DIR / "geckonum_annotations.zip"), "--store", str(store)]):
        raise CountboardError("GeckoNum import failed; see the messages above")
    _step("compare generators pairwise per classifier (P(A > B) from the BCC cells)")
    if cli_main(["compare", "--store", str(store)]):
        raise CountboardError("the generator comparison failed; see the messages above")
    _step("index the store into DuckDB")
    if cli_main(["index", "--store", str(store)]):
        raise CountboardError("indexing failed; see the messages above")
    print(f"\nDemo finished in {time.time() - t0:.0f} s. Store: {store}\n"
          f"  Leaderboard:  countboard leaderboard --store {store}   → http://127.0.0.1:8501\n"
          f"  MLflow UI:    countboard mlflow-ui --store {store}   → http://127.0.0.1:5000\n"
          "  (`countboard` is in .venv/bin: activate it with `. .venv/bin/activate` or prefix `.venv/bin/`; both "
          "servers bind to 127.0.0.1)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the offline demo end to end (train, sweep, import, index)")
    p.add_argument("--store", default=None, help="store directory (default: $COUNTBOARD_STORE, else ./mlruns)")
    p.add_argument("--jobs", type=int, default=2, help="parallel sweep jobs (joblib launcher)")
    p.set_defaults(func=run)
