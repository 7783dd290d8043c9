"""Negative-label test throughput: cached image features + batched prompts against a per-pair loop.

Both modes run on the same counter object and the same (image, class) pairs, side by side in one process:

- ``cached``: the code of ``PracoNegative.run_units`` — ``encode_images`` once per batch of images, then one
  ``decode`` call per image with every class name of the split;
- ``per_pair``: ``counter.density([image], [class])`` for every pair (the image encoder runs for every pair).

Counters: ``clipseg`` (randomly initialised at the size of CIDAS/clipseg-rd64-refined: ViT-B/16 vision encoder at
352 px, 12-layer text encoder, 3-layer decoder), ``shapecount`` (the trained checkpoint under
``<data-dir>/checkpoints`` when present, else a randomly initialised one: speed does not depend on the weights), and
optionally ``owlv2`` (ViT-B/16 at ``--owl-image-size`` px). Random models are saved to a temporary folder and
loaded back with ``from_pretrained``, the code path of the real checkpoints. The counts of both modes are compared.

    python benchmarks/praco_throughput.py --images 6 --classes 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.models.base import Counter
from countboard.models.hf_loading import byte_level_clip_tokenizer


def _text_config(tok) -> dict:
    return dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id)


def build_clipseg(tmp: Path) -> Counter:
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation, CLIPSegProcessor, ViTImageProcessor

    from countboard.counting.models.clipseg import ClipSegCounter

    tok = byte_level_clip_tokenizer()
    config = CLIPSegConfig(text_config=_text_config(tok), vision_config=dict(patch_size=16, image_size=224),
                           extract_layers=[3, 6, 9], reduce_dim=64, use_complex_transposed_convolution=True)
    CLIPSegForImageSegmentation(config).save_pretrained(tmp / "clipseg")
    processor = CLIPSegProcessor(image_processor=ViTImageProcessor(size={"height": 352, "width": 352}),
                                 tokenizer=tok)
    processor.save_pretrained(tmp / "clipseg")
    return ClipSegCounter(model_id=str(tmp / "clipseg"))


def build_owlv2(tmp: Path, image_size: int) -> Counter:
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    from countboard.counting.models.owlv2 import Owlv2Counter

    tok = byte_level_clip_tokenizer()
    config = Owlv2Config(text_config=_text_config(tok),
                         vision_config=dict(patch_size=16, image_size=image_size))
    Owlv2ForObjectDetection(config).save_pretrained(tmp / "owlv2")
    Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": image_size, "width": image_size}),
                   tokenizer=tok).save_pretrained(tmp / "owlv2")
    return Owlv2Counter(model_id=str(tmp / "owlv2"))


def build_shapecount(tmp: Path, data_dir: Path, classes: list[str]) -> tuple[Counter, str]:
    from countboard.counting.models.shapecount import (
        ShapeCountArch,
        ShapeCountCounter,
        ShapeCountNet,
        local_checkpoint_path,
        save_checkpoint,
    )

    trained = local_checkpoint_path(data_dir, "aware")
    if trained.is_file():
        return ShapeCountCounter(checkpoint=str(trained)), f"trained ({trained})"
    rng = np.random.default_rng(0)
    table = {c: (v / np.linalg.norm(v)).astype(np.float32) for c, v in zip(classes, rng.normal(size=(len(classes), 384)),
                                                                          strict=True)}
    path = save_checkpoint(tmp / "shapecount.pt", ShapeCountNet(ShapeCountArch()).eval(), "aware", table, {})
    return ShapeCountCounter(checkpoint=str(path)), "random weights"


def run_cached(counter: Counter, items, classes, batch_size: int) -> np.ndarray:
    """The negative-label task's loop: encode a batch of images once, decode each image with every class."""
    counts = []
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        for feat in counter.encode_images(chunk):
            counts.append([float(m.sum()) for m in counter.decode([feat] * len(classes), classes)])
    return np.array(counts)


def run_per_pair(counter: Counter, items, classes) -> np.ndarray:
    return np.array([[float(counter.density([it], [c])[0].sum()) for c in classes] for it in items])


def _clear_text_cache(counter: Counter) -> None:
    """Both modes start without cached prompt embeddings (each then encodes every class name once)."""
    cache = getattr(counter, "_text", None)
    if hasattr(cache, "clear"):
        cache.clear()


def measure(name: str, counter: Counter, items, classes, batch_size: int) -> dict:
    run_cached(counter, items[:1], classes[:2], batch_size)  # warm-up (lazy inits, allocator)
    _clear_text_cache(counter)
    t0 = time.perf_counter()
    cached = run_cached(counter, items, classes, batch_size)
    t1 = time.perf_counter()
    _clear_text_cache(counter)
    per_pair = run_per_pair(counter, items, classes)
    t2 = time.perf_counter()
    pairs = len(items) * len(classes)
    return {"counter": name, "pairs": pairs, "cached_s": t1 - t0, "per_pair_s": t2 - t1,
            "cached_pairs_per_s": pairs / (t1 - t0), "per_pair_pairs_per_s": pairs / (t2 - t1),
            "speedup": (t2 - t1) / (t1 - t0), "max_count_diff": float(np.abs(cached - per_pair).max())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=6, help="test images (one per class, in dataset order)")
    parser.add_argument("--classes", type=int, default=10, help="synthetic shape classes = prompts per image")
    parser.add_argument("--counters", default="clipseg,shapecount", help="comma list of clipseg, shapecount, owlv2")
    parser.add_argument("--owl-image-size", type=int, default=960)
    parser.add_argument("--batch-size", type=int, default=8, help="images per encode_images call (cached mode)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--quick", action="store_true", help="2 images x 5 classes, CLIPSeg only")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.classes, args.counters = 2, 5, "clipseg"
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ds = SyntheticShapes(tmp / "shapes", split="test", n_classes=args.classes)
        classes = ds.classes
        items = [ds.load(i) for i in ds.image_ids[: args.images]]
        print(f"{len(items)} images x {len(classes)} prompts = {len(items) * len(classes)} pairs; "
              f"torch threads {torch.get_num_threads()}")
        rows = []
        for name in args.counters.split(","):
            if name == "clipseg":
                counter, note = build_clipseg(tmp), "random weights, clipseg-rd64-refined size"
            elif name == "owlv2":
                counter, note = build_owlv2(tmp, args.owl_image_size), f"random weights, B/16 @ {args.owl_image_size}"
            elif name == "shapecount":
                counter, note = build_shapecount(tmp, Path(args.data_dir), classes)
            else:
                parser.error(f"unknown counter {name!r}")
            with torch.inference_mode():
                row = measure(name, counter, items, classes, args.batch_size)
            rows.append(row)
            print(f"{name:<11} ({note}): cached {row['cached_pairs_per_s']:8.2f} pairs/s | per-pair "
                  f"{row['per_pair_pairs_per_s']:8.2f} pairs/s | speedup {row['speedup']:5.1f}x | "
                  f"max |count diff| {row['max_count_diff']:.2e}", flush=True)
            del counter
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
