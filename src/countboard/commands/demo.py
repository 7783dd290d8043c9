"""``countboard demo``: the offline demo — train, sweep ``experiment=demo``, import GeckoNum, index, explain.

Each step is skipped when its result is already in the store (a counter already trained with the same settings is
kept), so a second ``make demo`` is quick and a failed one resumes where it stopped. The counters train for
``DEMO_EPOCHS`` epochs; each step's wall and CPU time (this process and the ones it waited for) is printed in a
table at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator

from countboard.counting.models.shapecount_recipes import TRAIN_EPOCHS
from countboard.errors import ConfigError, CountboardError

#: Epochs of each shapecount recipe in the demo: train-counter's default. 5 epochs were measured and broke the
#: board's rankings (the aware counter fell below the naive one on the mosaic test; docs/benchmarks.md).
DEMO_EPOCHS = TRAIN_EPOCHS


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class StepTimes:
    """Wall and CPU seconds of the demo's steps, printed as one table at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[None]:
        print(f"\n== {title}", flush=True)
        wall, cpu = time.perf_counter(), _cpu_seconds()
        try:
            yield
        finally:
            self.rows.append((title, time.perf_counter() - wall, _cpu_seconds() - cpu))

    def table(self) -> str:
        """The steps, their wall and CPU seconds and the total, as aligned text.

        Example:
            >>> t = StepTimes(); t.rows = [("train", 20.04, 38.2), ("index", 1.5, 1.2)]
            >>> print(t.table())
            step   wall s   CPU s
            train    20.0    38.2
            index     1.5     1.2
            total    21.5    39.4
        """
        rows = [*self.rows, ("total", sum(r[1] for r in self.rows), sum(r[2] for r in self.rows))]
        width = max(len("step"), *(len(r[0]) for r in rows))
        lines = [f"{'step':<{width}}  {'wall s':>6}  {'CPU s':>6}"]
        lines += [f"{name:<{width}}  {wall:>6.1f}  {cpu:>6.1f}" for name, wall, cpu in rows]
        return "\n".join(lines)


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
    times = StepTimes()
    with times.step("train the shapecount counters (naive and aware recipes)"):
        _call([sys.executable, "-m", "countboard.cli", "train-counter", "--recipe", "both", "--epochs",
               str(args.epochs), "--store", str(store)])
    with times.step("sweep conf/experiment/demo.yaml into the embedded MLflow store"):
        _call([sys.executable, "-m", "countboard.commands.sweep", "experiment=demo", f"tracking.store_dir={store}",
               f"hydra.launcher.n_jobs={args.jobs}"] + (["progress=false"] if not sys.stdout.isatty() else []))
    with times.step("import the GeckoNum human study (7 generators, bundled CC-BY 4.0 release)"):
        if cli_main(["import-geckonum", str(GECKONUM_DIR / "geckonum_annotations.zip"), "--store", str(store)]):
            raise CountboardError("GeckoNum import failed; see the messages above")
    with times.step("compare generators pairwise per classifier (P(A > B) from the BCC cells)"):
        if cli_main(["compare", "--store", str(store)]):
            raise CountboardError("the generator comparison failed; see the messages above")
    with times.step("index the store into DuckDB"):
        if cli_main(["index", "--store", str(store)]):
            raise CountboardError("indexing failed; see the messages above")
    total = sum(row[1] for row in times.rows)
    print(f"\n{times.table()}\n\nDemo finished in {total:.0f} s. Store: {store}\n"
          f"  Leaderboard:  countboard leaderboard --store {store}   → http://127.0.0.1:8501\n"
          f"  MLflow UI:    countboard mlflow-ui --store {store}   → http://127.0.0.1:5000\n"
          "  (`countboard` is in .venv/bin: activate it with `. .venv/bin/activate` or prefix `.venv/bin/`; both "
          "servers bind to 127.0.0.1)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the offline demo end to end (train, sweep, import, index)")
    p.add_argument("--store", default=None, help="store directory (default: $COUNTBOARD_STORE, else ./mlruns)")
    p.add_argument("--jobs", type=int, default=2, help="parallel sweep jobs (joblib launcher)")
    p.add_argument("--epochs", type=int, default=DEMO_EPOCHS,
                   help=f"training epochs of each shapecount recipe (default {DEMO_EPOCHS})")
    p.set_defaults(func=run)
