"""``countboard import-geckonum``: score GeckoNum's human study and log one MLflow run per (generator, task).

Example:
    countboard import-geckonum data/geckonum/geckonum_annotations.zip --store mlruns
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from countboard.commands import experiment_argument, store_argument
from countboard.errors import DataNotFoundError
from countboard.metrics.numeracy_rules import RANGE_RULES, TIE_RULES


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


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def run(args) -> int:
    from countboard.numeracy.importer import ImportOptions, import_geckonum
    from countboard.numeracy.release import GENERATORS
    from countboard.tracking.store import open_store

    annotations = Path(args.path)
    prompts = Path(args.prompts) if args.prompts else _default_prompts(annotations)
    generators = None
    if args.allow_generator:
        generators = [*GENERATORS, *args.allow_generator]
    opts = ImportOptions(tasks=tuple(args.task or (1, 2, 3)), generators=generators, ties=args.ties,
                         ranges=args.ranges, n_boot=args.n_boot, n_perm=args.n_perm, seed=args.seed)  # fmt: skip
    start = time.perf_counter()
    previous = signal.signal(signal.SIGTERM, _terminate)  # the run being logged then ends FAILED, not RUNNING
    try:
        report = import_geckonum(
            annotations, prompts, lambda: open_store(args.store, create=True), args.experiment, opts, args.force
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    if report.ended:
        print(f"ended {len(report.ended)} run(s) left RUNNING by a killed import", file=sys.stderr)
    for generator, task in report.busy:
        print(f"skipped {generator} {task}: another import is logging it now", file=sys.stderr)
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
    store_argument(p, creates=True)
    experiment_argument(p, "MLflow experiment")
    p.add_argument("--task", type=int, action="append", choices=(1, 2, 3), help="only this task (repeatable)")
    p.add_argument("--allow-generator", action="append", metavar="NAME",
                   help="accept a generator name besides the seven of the study (repeatable)")  # fmt: skip
    p.add_argument("--ties", choices=TIE_RULES, default="first",
                   help="how a tied mode is resolved (see docs/geckonum.md; default: first, the answer given "
                        "first)")  # fmt: skip
    p.add_argument("--ranges", choices=RANGE_RULES, default="up",
                   help="range answers ('2-3' -> 2.5): rounded up as in the paper (default) or kept as midpoints")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples for the 95%% interval")
    p.add_argument("--n-perm", type=int, default=1000,
                   help="label permutations of each controlled comparison's control test (Task 1)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--force", action="store_true", help="log again even if an identical import exists")
    p.add_argument("--show-problems", type=int, default=20, help="skipped rows to print (default: 20)")
    p.set_defaults(func=run)
