"""How many counts change, and by how much, when a counter runs under ``precision=bf16`` (or fp16) instead of fp32.

Every counter that runs offline, built as the tests build it (tests/fixtures/tiny_models.py: seeded random
weights, 64 px inputs; shapecount: a random ``ShapeCountNet`` with random unit prompt vectors), counts the same
(image, prompt) pairs in fp32 and under ``countboard.models.precision.numerics(device, precision)``, side by side
in one process. Random tiny models are not trained ones: the figures show that half precision does change records
(why it is part of the cell identity), not how much it changes a trained model's. "changed" counts the pairs
whose rounded count differs; ``max |d|`` and ``mean |d|`` are over the raw counts.

    PYTHONPATH=src:. python benchmarks/precision_counts.py --images 12 --precision bf16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' tiny-model builders

from tests.fixtures.tiny_models import (  # noqa: E402
    build_tiny_clipseg,
    build_tiny_grounding_dino,
    build_tiny_owlv2,
    random_items,
)

from countboard.models.precision import numerics  # noqa: E402

PROMPTS = ["red circle", "blue square", "apples", "cat", "dog"]


def build(name: str, tmp: Path):
    if name == "owlv2":
        from countboard.counting.models.owlv2 import Owlv2Counter

        return Owlv2Counter(model_id=str(build_tiny_owlv2(tmp / name)), score_threshold=0.5)
    if name == "clipseg":
        from countboard.counting.models.clipseg import ClipSegCounter

        return ClipSegCounter(model_id=str(build_tiny_clipseg(tmp / name)), mask_threshold=0.5,
                              min_region_frac=0.002)
    if name == "grounding_dino":
        from countboard.counting.models.grounding_dino import GroundingDinoCounter

        (tmp / name).mkdir()
        return GroundingDinoCounter(model_id=str(build_tiny_grounding_dino(tmp / name)), box_threshold=0.6,
                                    text_threshold=0.25)
    if name == "shapecount":
        from countboard.counting.models.shapecount import (
            ShapeCountArch,
            ShapeCountCounter,
            ShapeCountNet,
            save_checkpoint,
        )

        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        vecs = rng.normal(size=(len(PROMPTS), 384))
        table = dict(zip(PROMPTS, (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32),
                         strict=True))
        path = save_checkpoint(tmp / "shapecount.pt", ShapeCountNet(ShapeCountArch()).eval(), "aware", table, {})
        return ShapeCountCounter(checkpoint=str(path))
    raise SystemExit(f"unknown counter {name!r}: choose from owlv2, clipseg, grounding_dino, shapecount")


def counts(counter, items, prompts, device: str, precision: str) -> np.ndarray:
    pairs = [(it, p) for it in items for p in prompts]
    with torch.inference_mode(), numerics(device, precision):
        maps = counter.density([it for it, _ in pairs], [p for _, p in pairs])
    return np.array([float(m.sum()) for m in maps])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=12)
    parser.add_argument("--precision", default="bf16", help="bf16, fp16 or tf32 (compared with fp32)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--counters", default="owlv2,clipseg,grounding_dino,shapecount")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    items = random_items(args.images, seed=3, sizes=((40, 64), (64, 48)))  # the tiny DINO needs >1 px at 1/32
    print(f"{len(items)} images x {len(PROMPTS)} prompts; {args.precision} vs fp32 on {args.device}; "
          "tiny random models (tests/fixtures/tiny_models.py)")
    print(f"{'counter':<15} {'pairs':>5} {'changed':>8} {'max |d|':>8} {'mean |d|':>9} {'fp32 mean':>9} "
          f"{'sum d':>7}")
    with tempfile.TemporaryDirectory() as tmp_name:
        for name in args.counters.split(","):
            counter = build(name, Path(tmp_name))
            base = counts(counter, items, PROMPTS, args.device, "fp32")
            other = counts(counter, items, PROMPTS, args.device, args.precision)
            diff = other - base
            changed = np.round(other) != np.round(base)  # shapecount's counts are real: compare them rounded
            print(f"{name:<15} {len(base):>5} {int(changed.sum()):>8} {np.abs(diff).max():>8.3f} "
                  f"{np.abs(diff).mean():>9.3f} {base.mean():>9.2f} {diff.sum():>7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
