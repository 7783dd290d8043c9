"""How often the pointing-game uncertainty fires with each upsampling of GradCAM-like grids, and with tie tolerances.

Random ``grid × grid`` maps (cubed uniform noise, like sparse GradCAM grids) are upsampled to ``size × size`` with
``bilinear`` and with the paper's ``bicubic_clip`` (``countboard.grounding.models.gradcam.upsample_map``); each gets a random
box, and ``pg_uncertain`` is counted at ``tie_tol`` 0, 1e-3 and 1e-2 (delta = 50, tau = 0.7).

Run: ``python benchmarks/pg_uncertainty_upsampling.py [--n 300] [--size 384] [--grid 24] [--quick]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from countboard.grounding.models.gradcam import UPSAMPLE_METHODS, upsample_map
from countboard.metrics.grounding import grounding_metrics_batch

TOLERANCES = (0.0, 1e-3, 1e-2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--size", type=int, default=384)
    p.add_argument("--grid", type=int, default=24)
    p.add_argument("--quick", action="store_true", help="60 maps of 192 px")
    args = p.parse_args()
    n, size = (60, 192) if args.quick else (args.n, args.size)
    rng = np.random.default_rng(0)
    grids = rng.random((n, args.grid, args.grid)) ** 3
    y0, x0 = rng.integers(0, size // 2, n), rng.integers(0, size // 2, n)
    boxes = np.stack([y0, x0, y0 + rng.integers(16, size // 2, n), x0 + rng.integers(16, size // 2, n)], axis=1)
    print(f"{n} random {args.grid}x{args.grid} grids upsampled to {size}x{size}, delta 50, tau 0.7")
    print("| upsample | " + " | ".join(f"tie_tol={t:g}" for t in TOLERANCES) + " | upsampling ms/map |")
    print("|---|" + "---|" * (len(TOLERANCES) + 1))
    for method in UPSAMPLE_METHODS:
        start = time.perf_counter()
        maps = np.stack([upsample_map(g, (size, size), method) for g in grids])
        ms = (time.perf_counter() - start) / n * 1e3
        counts = [int(grounding_metrics_batch(maps, boxes, tie_tol=t)["pg_uncertain"].sum()) for t in TOLERANCES]
        print(f"| {method} | " + " | ".join(f"{c} / {n}" for c in counts) + f" | {ms:.2f} |")


if __name__ == "__main__":
    main()
