"""``countboard export-praco``: write project runs in the authors' released layout, for their scorer.

The logic is ``countboard.counting.released.exporter``; this module parses and prints.

Example:
    countboard export-praco 3f2a... 9b1c... --out benchmark_results --store mlruns
"""

from __future__ import annotations

from countboard.commands import store_argument


def run(args) -> int:
    from countboard.counting.released.exporter import export_praco
    from countboard.tracking.store import open_store

    folder = export_praco(open_store(args.store), args.run, args.out, args.model, args.split, args.gt_dir)
    print(f"wrote {folder}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export-praco", help="write PrACo runs in the authors' released layout (for their scorer)",
        description="Write the count tables (and kept density maps) of one counter's PrACo runs as "
        "benchmark_results/<MODEL>/, the layout the authors' main_statistics.py reads.")
    p.add_argument("run", nargs="+", help="run id(s): an import-praco run, or praco_negative + praco_mosaic runs")
    p.add_argument("--out", required=True, help="parent folder (benchmark_results)")
    p.add_argument("--model", default=None, help="model name in the file names (default: the run's model tag)")
    p.add_argument("--split", default=None, help="split in the file names (default: the run's split tag, or test)")
    p.add_argument("--gt-dir", default=None, help="where ground-truth maps go (default: OUT/gt_density_maps)")
    store_argument(p)
    p.set_defaults(func=run)
