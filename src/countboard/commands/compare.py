"""``countboard compare``: pairwise ``P(generator A > generator B)`` for one classifier, logged as a run.

The tasks compared are those the domains declare (``COMPARED`` of ``countboard.acs.tasks`` and
``countboard.numeracy.tasks``); reading the cells and logging the runs is ``countboard.quantify.comparison_runs``.
"""

from __future__ import annotations

import argparse

from countboard.acs.tasks import COMPARED as ACS_COMPARED
from countboard.commands import experiment_argument, store_argument
from countboard.numeracy.tasks import COMPARED as NUMERACY_COMPARED

TASKS = {spec.task: spec for spec in (*ACS_COMPARED, *NUMERACY_COMPARED)}


def run(args: argparse.Namespace) -> int:
    from countboard.protocol import DEFAULT_LABEL
    from countboard.quantify.comparison_runs import compare_generators
    from countboard.tracking.store import open_store

    tasks = list(TASKS.values()) if args.task == "all" else [TASKS[args.task]]
    done = compare_generators(open_store(args.store), args.experiment, tasks, args.classifier, args.force)
    for c in done:
        protocol = f" / {c.protocol}" if c.protocol != DEFAULT_LABEL else ""
        left_out = (f" ({c.n_left_out} partial or damaged run(s) left out: complete runs only)"
                    if c.n_left_out else "")
        print(f"{c.task} / {c.dataset} / {c.classifier}{protocol}: {c.n_generators} generators, "
              + (f"logged run {c.run_id}" if c.run_id else "unchanged, skipped") + left_out)
    logged = sum(c.run_id is not None for c in done)
    print(f"compare: {logged} comparison run(s) logged, {len(done) - logged} unchanged")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="log pairwise P(generator A > B) per classifier from the BCC cells",
                              description="Read the complete FINISHED cells of the BCC tasks (smoke runs and runs "
                                          "with failed units are left out) and log one comparison run per "
                                          "(task, dataset, classifier, protocol): P(A > B) for every pair of "
                                          "generators.")
    store_argument(p)
    experiment_argument(p, "experiments to read and log to")
    p.add_argument("--task", choices=[*TASKS, "all"], default="all", help="which task's cells to compare")
    p.add_argument("--classifier", default=None, help="only the cells judged by this classifier / evaluator")
    p.add_argument("--force", action="store_true", help="log again even if an identical comparison exists")
    p.set_defaults(func=run)
