"""Time per image of GeckoNum's release path: reading a released image, the counter-based score, and DSG + TIFA asked
to a VLM (``geckonum_autometrics``'s ``run_units``), on a fake release of ``--size`` px images in the release's
layout (``tests/fixtures/geckonum_images.py``).

The models are random: the tests' tiny LLaVA (one answer token) and either the tests' tiny OWLv2 (``--counter
tiny``) or an OWLv2 at OWLv2-base's size (``--counter base``, 960 px). So the figures are the pipeline's own cost
(decoding and resizing the 1024 px images, batching, parsing) plus a base-size detector; a real VLM's generation
comes on top. ``docs/geckonum.md`` ("Running on the real release") quotes them.

    python benchmarks/geckonum_time.py --device cpu --images 24
    python benchmarks/geckonum_time.py --device cuda --images 48 --counter base --json geckonum.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.fixtures.geckonum_images import make_release  # noqa: E402

from countboard.models.tiny_asked import build_tiny_vlm, force_answer  # noqa: E402
from countboard.numeracy.datasets.prompts import GeckoNumPromptSet  # noqa: E402
from countboard.numeracy.models.released import ReleasedImages  # noqa: E402
from countboard.numeracy.tasks.autometrics import GeckoNumAutoMetrics  # noqa: E402
from countboard.results import RunContext  # noqa: E402

GENERATOR = "muse_b"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def counter_node(kind: str, tmp: Path, device: str) -> dict:
    """The counter of the counter-based score, as a config node."""
    if kind == "tiny":
        from tests.fixtures.tiny_models import build_tiny_owlv2

        folder = build_tiny_owlv2(tmp / "owlv2")
    else:
        from praco_throughput import build_owlv2

        build_owlv2(tmp, 960, "cpu")
        folder = tmp / "owlv2"
    return {"_target_": "countboard.counting.models.owlv2.Owlv2Counter", "name": "owlv2", "kind": "counter",
            "model_id": str(folder)}


def timed(task: GeckoNumAutoMetrics, gen, prompts, units, ctx) -> float:
    """Seconds of ``run_units`` over ``units`` (after one warm-up run on the first few)."""
    task.run_units(gen, prompts, units[:2], ctx)
    _sync(ctx.device)
    t0 = time.perf_counter()
    task.run_units(gen, prompts, units, ctx)
    _sync(ctx.device)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--images", type=int, default=24)
    p.add_argument("--size", type=int, default=1024, help="side of the fake release's images (the release: 1024)")
    p.add_argument("--counter", choices=("tiny", "base"), default="tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        root, image_dir = make_release(tmp, generators=(GENERATOR,), n_prompts=max(8, args.images), size=args.size)
        gen = ReleasedImages(GENERATOR, str(image_dir))
        prompts = GeckoNumPromptSet(str(root))
        ctx = RunContext(device=args.device, seed=0, batch_size=args.batch_size, work_dir=tmp, progress=False)
        vlm = build_tiny_vlm(tmp / "vlm", "llava", words=("yes", "no"))
        vlm_node = {"_target_": "countboard.counting.models.vlm.VlmCounter", "name": "tiny_vlm", "kind": "counter",
                    "model_id": str(vlm), "max_new_tokens": 1}
        counter = counter_node(args.counter, tmp, args.device)

        def task(metrics):
            return GeckoNumAutoMetrics(counter, human_labels=str(root), human_generator=GENERATOR, vlm=vlm_node,
                                       metrics=metrics)

        qa = task(["dsg", "tifa"])
        units = [u for u in qa.units(gen, prompts, ctx) if u in gen.release.files][: args.images]
        t0 = time.perf_counter()
        for u in units:
            gen.generate_batch([prompts.by_id[int(u.split("_")[1])]], [int(u.rsplit("_", 1)[1])])
        read_s = time.perf_counter() - t0
        counted_s = timed(task(["counter"]), gen, prompts, units, ctx)
        adapter, _ = qa.asked(args.device, [])
        handle = force_answer(adapter.model, [adapter.tokenizer.get_vocab()["yes"]])
        try:
            asked_s = timed(qa, gen, prompts, units, ctx)
        finally:
            handle.remove()
    n = len(units)
    row = {"device": args.device, "images": n, "size": args.size, "counter": args.counter,
           "read_ms_per_image": 1e3 * read_s / n, "counter_ms_per_image": 1e3 * counted_s / n,
           "dsg_tifa_ms_per_image": 1e3 * asked_s / n,
           "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None}
    print(f"{n} images of {args.size} px on {args.device}: reading {row['read_ms_per_image']:.1f} ms/image; "
          f"counter-based score ({args.counter} OWLv2, reading included) {row['counter_ms_per_image']:.1f} ms/image; "
          f"DSG + TIFA (tiny LLaVA, one answer token, reading included) {row['dsg_tifa_ms_per_image']:.1f} ms/image")
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
