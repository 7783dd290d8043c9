"""``countboard import-praco``: log PrACo results in the authors' released layout as one MLflow run per folder.

The scoring and logging are ``countboard.counting.released.importer``; this module parses and prints.

Example:
    countboard import-praco benchmark_results/CountGD --fsc147 data/fsc147_meta --gt-density-maps gt_maps
"""

from __future__ import annotations

import sys

from countboard.commands import experiment_argument, store_argument
from countboard.counting.released import HALVES


def run(args) -> int:
    from countboard.counting.released.importer import import_folders
    from countboard.tracking.store import open_store

    results = import_folders(
        args.model_dir, args.fsc147, open_store(args.store, create=True), multiclass_meta=args.multiclass,
        final_metrics=args.final_metrics, all_class_images=args.all_class_images, split=args.split, gt_maps_dir=args.gt_density_maps, exclude=args.exclude, collage=args.collage,
        model=args.model, official_rounding=args.official_rounding, keep_maps=args.keep_maps,
        experiment=args.experiment, force=args.force)
    for result in results:
        problems = result.scored.problems
        for problem in problems[: args.show_problems]:
            print(f"left out {problem}", file=sys.stderr)
        if len(problems) > args.show_problems:
            print(f"... and {len(problems) - args.show_problems} more (all in the run's problems.json)",
                  file=sys.stderr)
        what = f"logged run {result.run_id}" if result.run_id else "skipped: an identical import exists (--force)"
        print(f"{result.tags.model} / {args.split}: {what}; {len(problems)} cell(s) left out")
    if args.final_metrics:
        print(f"wrote {args.final_metrics}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "import-praco", help="import PrACo / PrACo++ results in the authors' released layout: one run per folder",
        description="Score a benchmark_results/<MODEL>/ (PrACo) or multiclass_benchmark_results/<MODEL>/ "
        "(PrACo++) folder with the paper's definitions and the released scorer's (official_*), and log one "
        "MLflow run. Cells that cannot be scored are reported as "
        "file:row,column: reason and left out.")
    p.add_argument("model_dir", nargs="+", help="benchmark_results/<MODEL>/ or multiclass_benchmark_results/<MODEL>/ "
                   "folder(s), one run each")
    p.add_argument("--fsc147", default=None, metavar="META_DIR",
                   help="FSC-147 metadata (PrACo folders): ImageClasses_FSC147.txt, Split_Classes_FSC147.json, counts")
    p.add_argument("--multiclass", default=None, metavar="META_DIR",
                   help="PrACo++ metadata (multi-class folders): multiclass_split_{images,classes}.json, "
                   "multiclass_class_counts_per_image.json; ground-truth maps in its density_maps/")
    p.add_argument("--all-class-images", default="leave_out", metavar="leave_out|count",
                   help="PrACo++: images holding every class in MNP, NMN macro and PCCN (official_mc_* count them)")
    p.add_argument("--split", default="test", help="split (default: test)")
    p.add_argument("--gt-density-maps", default=None, metavar="DIR",
                   help="ground-truth density maps <img id>.npy, PrACo++: <img id>_<class>.npy (for the localized metrics)")
    p.add_argument("--exclude", default=None, metavar="FILE",
                   help="exclusion list, ids with or without .jpg (default: the bundled 38 multi-class images)")
    p.add_argument("--collage", choices=sorted(HALVES), default="vertical", help="mosaic orientation")
    p.add_argument("--model", default=None, help="model name in the file names (default: the folder's name)")
    p.add_argument("--official-rounding", action="store_true",
                   help="log official_* rounded as the released scorer (3 decimals, PCCN 2)")
    p.add_argument("--keep-maps", action="store_true", help="store the density maps in the run (for export)")
    store_argument(p, creates=True)
    experiment_argument(p, "MLflow experiment")
    p.add_argument("--force", action="store_true", help="log again even if an identical import exists")
    p.add_argument("--final-metrics", default=None, metavar="CSV",
                   help="also write the released final_metrics file, one row per imported model")
    p.add_argument("--show-problems", type=int, default=20, help="left-out cells to print (default: 20)")
    p.set_defaults(func=run)
