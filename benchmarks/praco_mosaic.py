"""Mosaic test: the sums of each map made where the counter computes, against every map brought to the host.

Both modes run ``PracoMosaic.run_units`` on the same counter object and the same mosaics, side by side in one
process, the modes alternating per repeat (best time of ``--repeats`` kept, after one untimed round):

- ``sums``: the task as it runs (``n_figures=0``): each map is reduced where ``Counter.reduce_maps`` makes it, and
  only the sums of a batch come to the host;
- ``maps``: ``keep_maps=True``: every map comes to the host and is summed there (what the task did for every
  mosaic before the sums moved to the device, less the pointing game it computed and did not use);
- ``before`` (with ``--before REV``): ``PracoMosaic`` of git revision ``REV`` (its ``praco.py`` loaded beside the
  current package), e.g. the revision before the change.

The records of the modes are compared (equal on the CPU). Counters: ``oracle``, ``shapecount`` (random weights),
the tests' tiny random ``clipseg`` and ``owlv2``.

    python benchmarks/praco_mosaic.py --classes 4 --images 3 --tile 96 --before 643f90b
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.models.oracle import OracleCounter
from countboard.counting.tasks.praco import PracoMosaic
from countboard.models.precision import numerics
from countboard.results import RunContext

ROOT = Path(__file__).resolve().parents[1]


def task_of_revision(rev: str):
    """``PracoMosaic`` of ``praco.py`` at git revision ``rev``, imported beside the current package."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/countboard/counting/tasks/praco.py"],
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "praco_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("praco_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PracoMosaic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--images", type=int, default=3, help="test images per class")
    parser.add_argument("--tile", type=int, default=96, help="image side (the mosaic is tile x 2 tile)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="oracle,shapecount,clipseg,owlv2")
    parser.add_argument("--before", default=None, help="git revision whose PracoMosaic is also timed")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="3 classes x 1 image of 48 px, oracle and CLIPSeg")
    args = parser.parse_args()
    if args.quick:
        args.classes, args.images, args.tile, args.repeats, args.models = 3, 1, 48, 1, "oracle,clipseg"
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from praco_throughput import build_shapecount, build_tiny

    tmp = Path(tempfile.mkdtemp())
    data = SyntheticShapes(tmp / "shapes", image_size=(args.tile, args.tile), size_range=(6.0, 12.0),
                           count_range=(1, 12), images_per_class={"train": 0, "val": 0, "test": args.images},
                           multi_class_images=0, n_classes=args.classes)
    modes = {"sums": lambda: PracoMosaic(n_figures=0), "maps": lambda: PracoMosaic(n_figures=0, keep_maps=True)}
    if args.before:
        before = task_of_revision(args.before)
        modes["before"] = lambda: before(n_figures=0)
    print(f"{len(PracoMosaic().units(None, data, RunContext('cpu', 0, 1, tmp, False)))} mosaics of "
          f"{args.tile} x {2 * args.tile} px, batch {args.batch_size}, device {args.device}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'counter':<11} " + " ".join(f"{m + ' s':>9}" for m in modes) + "   ratios (vs sums)   records")
    for name in args.models.split(","):
        if name == "oracle":
            counter = OracleCounter()
        elif name == "shapecount":
            counter, _ = build_shapecount(tmp, tmp, data.classes, args.device)
        else:
            counter = build_tiny(name, tmp, args.device)
        best = dict.fromkeys(modes, float("inf"))
        records = {}
        for repeat in range(args.repeats + 1):  # the first round warms up and is not timed
            for mode, make in modes.items():
                task = make()
                ctx = RunContext(device=args.device, seed=0, batch_size=args.batch_size, work_dir=tmp,
                                 progress=False)
                units = task.units(counter, data, ctx)
                start = time.perf_counter()
                with numerics(args.device, "fp32"):
                    out = task.run_units(counter, data, units, ctx)
                if repeat:
                    best[mode] = min(best[mode], time.perf_counter() - start)
                records[mode] = [{k: v for k, v in r.items() if k != "maps_npz"} for r in out]
        same = all(records[m] == records["sums"] for m in modes)
        ratios = " ".join(f"{m} {best[m] / best['sums']:.2f}x" for m in modes if m != "sums")
        print(f"{name:<11} " + " ".join(f"{best[m]:>9.3f}" for m in modes) + f"   {ratios}   "
              f"{'equal' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
