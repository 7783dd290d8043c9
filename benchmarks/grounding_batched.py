"""Speed of the batched Q-GroundCAM metrics against the per-map form, measured side by side in one run.

Target: 10,000 maps of 384×384 in at most 10 s on 2 cores. Maps are smooth GradCAM-like blobs (a 24×24 grid
upsampled bilinearly to 384×384, the shape of ViT-B/16 CAMs) with one box each; generation is not timed. The per-map
form is timed on a subset and extrapolated.

Run: ``python benchmarks/grounding_batched.py [--n 10000] [--size 384] [--loop-n 200]``
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from countboard.metrics.grounding import grounding_metrics, grounding_metrics_batch


def make_maps(n: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    grid = torch.from_numpy(rng.random((n, 1, 24, 24), dtype=np.float32) ** 3)
    maps = torch.nn.functional.interpolate(grid, size=(size, size), mode="bilinear", align_corners=False)
    y0 = rng.integers(0, size // 2, n)
    x0 = rng.integers(0, size // 2, n)
    hgt = rng.integers(16, size // 2, n)
    wid = rng.integers(16, size // 2, n)
    return maps[:, 0].numpy(), np.stack([y0, x0, y0 + hgt, x0 + wid], axis=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--size", type=int, default=384)
    p.add_argument("--loop-n", type=int, default=200)
    p.add_argument("--gen-chunk", type=int, default=500)
    p.add_argument("--quick", action="store_true", help="1,000 maps and a 50-map loop (a smoke check of the script)")
    args = p.parse_args()
    if args.quick:
        args.n, args.loop_n = 1_000, 50
    rng = np.random.default_rng(0)
    batched = cpu = 0.0
    first_maps = first_boxes = None
    for s in range(0, args.n, args.gen_chunk):
        maps, boxes = make_maps(min(args.gen_chunk, args.n - s), args.size, rng)
        if first_maps is None:
            first_maps, first_boxes = maps, boxes
        t0, c0 = time.perf_counter(), time.process_time()
        grounding_metrics_batch(maps, boxes)
        batched += time.perf_counter() - t0
        cpu += time.process_time() - c0
    m = min(args.loop_n, len(first_maps))
    t0, c0 = time.perf_counter(), time.process_time()
    for k in range(m):
        grounding_metrics(first_maps[k], first_boxes[k])
    loop = (time.perf_counter() - t0) / m * args.n
    loop_cpu = (time.process_time() - c0) / m * args.n
    batch_small = grounding_metrics_batch(first_maps[:m], first_boxes[:m])
    agree = all(np.allclose(batch_small[key][k], grounding_metrics(first_maps[k], first_boxes[k])[key], atol=1e-5)
                for k in range(min(m, 50)) for key in ("iou_soft", "wdp", "io_ratio", "pg_hit"))
    print(f"maps: {args.n} x {args.size}x{args.size}; cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    print(f"batched: {batched:.2f} s wall ({cpu:.2f} s CPU), {batched / args.n * 1e3:.3f} ms/map (target <= 10 s)")
    print(f"per-map (extrapolated from {m}): {loop:.2f} s wall ({loop_cpu:.2f} s CPU), "
          f"{loop / args.n * 1e3:.3f} ms/map")
    print(f"speed-up batched vs per-map: {loop / batched:.1f}x wall, {loop_cpu / cpu:.1f}x CPU; "
          f"results agree: {agree}")


if __name__ == "__main__":
    main()
