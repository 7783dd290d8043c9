"""Where the negative-label test's time goes on a device: the cached loop of ``praco_throughput.py`` at several
batch sizes, then one run under ``torch.profiler``, its operators ranked by device time and by host time.

``praco_throughput.py`` gives the rates and their ratio to the model alone; this script says why a ratio is what it
is (kernel launches, host-to-device copies, synchronisations, post-processing) and whether a larger batch of images
per ``encode_images`` call closes the gap. Same random models at the real sizes, same pairs, same ``numerics``.

    python benchmarks/praco_profile.py --device cuda --counters owlv2,clipseg --precision bf16 --batch-sizes 16,64
    python benchmarks/praco_profile.py --device cpu --size tiny --images 4 --classes 3 --batch-sizes 2,4
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from countboard.counting.datasets.synthetic_shapes import SyntheticShapes  # noqa: E402
from countboard.models.precision import numerics  # noqa: E402
from praco_throughput import _build, _sync, run_cached  # noqa: E402


def rate(counter, items, classes, batch_size: int, device: str, repeats: int) -> float:
    """Pairs per second of the cached loop (after one warm-up run on the same shapes)."""
    run_cached(counter, items, classes, batch_size)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        run_cached(counter, items, classes, batch_size)
    _sync(device)
    return repeats * len(items) * len(classes) / (time.perf_counter() - t0)


def profile_table(counter, items, classes, batch_size: int, device: str, rows: int) -> str:
    """The operators of one cached run, by self device time and by self host time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        run_cached(counter, items, classes, batch_size)
        _sync(device)
    averages = prof.key_averages()
    parts = []
    if device.startswith("cuda"):
        parts.append(averages.table(sort_by="self_cuda_time_total", row_limit=rows, max_name_column_width=60))
    parts.append(averages.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=60))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counters", default="owlv2,clipseg")
    parser.add_argument("--precision", default="bf16", help="comma list: fp32, tf32, bf16, fp16")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--batch-sizes", default="16,64", help="images per encode_images call, comma list")
    parser.add_argument("--profile-batch", type=int, default=None, help="batch size of the profiled run (the first)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--owl-image-size", type=int, default=960)
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--out", type=Path, default=None, help="also write the profile tables to this file")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA device")
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    report = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ds = SyntheticShapes(tmp / "shapes", split="test", n_classes=args.classes)
        classes = ds.classes
        ids = ds.image_ids  # cycled when more images are asked than the split holds
        items = [ds.load(ids[i % len(ids)]) for i in range(args.images)]
        pairs = len(items) * len(classes)
        for name in args.counters.split(","):
            counter, note = _build(name, args, tmp, classes, parser)
            for precision in args.precision.split(","):
                with torch.inference_mode(), numerics(args.device, precision):
                    rates = {b: rate(counter, items, classes, b, args.device, args.repeats) for b in sizes}
                    line = (f"{name} ({note}; {args.device}, {precision}), {pairs} pairs: "
                            + " | ".join(f"batch {b}: {r:,.0f} pairs/s" for b, r in rates.items()))
                    print(line, flush=True)
                    table = profile_table(counter, items, classes, args.profile_batch or sizes[0], args.device,
                                          args.rows)
                report.append(f"== {line}\n{table}")
                print(table, flush=True)
            del counter
    if args.out:
        args.out.write_text("\n\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
