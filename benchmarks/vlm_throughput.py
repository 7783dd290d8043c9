"""Speed of a model asked in words: batched questions (each image encoded once) vs a per-pair loop.

The negative-label test asks every image one question per class (~29 on FSC-147). This script asks ``--images``
images ``--questions`` questions each through ``AskedModel`` three ways, on the same tiny random model
(``models/tiny_asked.py``; RANDOM weights, so the answers are noise, but the same noise each way):

- loop: one ``ask`` call (one processor call, one ``generate``) per (image, question) pair;
- batched: ``--batch-images`` images with all their questions per ``generate`` call, left-padded, each image's vision
  features computed once and reused for its questions;
- batched, features not reused: the same batches, every pair's image through the vision tower.

It checks that the three give the same answers, and prints the time per pair, the speed-ups and the load average
(the machine is shared: compare runs at similar loads). Target: batched >= 4x the loop at 10 questions per image
on the CPU. ``--device cuda`` runs it on a GPU.

Run: ``python benchmarks/vlm_throughput.py [--arch llava] [--images 8] [--questions 10] [--device cpu] [--quick]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from countboard.models.asked import AskedModel
from countboard.models.tiny_asked import ARCHS, WORDS, build_tiny_vlm

NOUNS = [w for w in WORDS if w.endswith("s") and len(w) > 3]


def _timed(fn, repeats: int) -> tuple[float, list[str]]:
    best, out = float("inf"), []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=ARCHS, default="llava")
    p.add_argument("--images", type=int, default=8)
    p.add_argument("--questions", type=int, default=10)
    p.add_argument("--batch-images", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--vision", default="", help="LLaVA's vision tower as SIZE,LAYERS,WIDTH (e.g. 224,12,384: a "
                   "ViT-S/16 at 224 px); default: the tiny 32 px tower")
    p.add_argument("--size", default="tiny", help="tiny, or smolvlm-256m (SmolVLM-256M's architecture, with "
                   "--arch idefics3)")
    p.add_argument("--json", default=None, help="also write the timings and questions per second to this file")
    p.add_argument("--repeats", type=int, default=3, help="best of this many timings of each way")
    p.add_argument("--quick", action="store_true", help="2 images, 4 questions, one timing (a smoke check)")
    args = p.parse_args(argv)
    if args.quick:
        args.images, args.questions, args.repeats, args.batch_images = 2, 4, 1, 2
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (64, 80, 3), dtype=np.uint8) for _ in range(args.images)]
    questions = [f"How many {NOUNS[k % len(NOUNS)]} are in the image?" for k in range(args.questions)]
    pairs = [(im, q) for im in images for q in questions]
    with tempfile.TemporaryDirectory() as tmp:
        sizes = dict(zip(("image_size", "layers", "hidden"), map(int, args.vision.split(",")), strict=True)) \
            if args.vision else {}
        path = build_tiny_vlm(tmp, args.arch, size=args.size, **sizes)
        plain = {"prompt": "plain", "prompt_prefix": "answer en "} if args.arch == "paligemma" else {}
        model = AskedModel(str(path), device=args.device, max_new_tokens=args.max_new_tokens, **plain)
        per_call = args.batch_images * args.questions

        def batched() -> list[str]:
            out = []
            for s in range(0, len(pairs), per_call):
                chunk = pairs[s:s + per_call]
                out += model.ask([im for im, _ in chunk], [q for _, q in chunk])
            return out

        def loop() -> list[str]:
            return [model.ask([im], [q])[0] for im, q in pairs]

        batched()  # warm-up: first calls build caches
        t_batched, a_batched = _timed(batched, args.repeats)
        model.reuse = False
        t_noreuse, a_noreuse = _timed(batched, args.repeats)
        model.reuse = True
        t_loop, a_loop = _timed(loop, args.repeats)
    n = len(pairs)
    same = a_batched == a_noreuse == a_loop
    load = os.getloadavg()
    tower = (f"vision tower {args.vision} (size,layers,width)" if args.vision else
             f"{args.size} architecture" if args.size != "tiny" else "tiny vision tower")
    print(f"{args.arch} ({tower}, random weights) on {args.device}: {args.images} images x {args.questions} questions "
          f"= {n} pairs, {per_call} pairs per generate call, max_new_tokens={args.max_new_tokens}, "
          f"best of {args.repeats}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    print(f"  per-pair loop                   {1000 * t_loop / n:8.2f} ms/pair")
    print(f"  batched, features not reused    {1000 * t_noreuse / n:8.2f} ms/pair   {t_loop / t_noreuse:5.1f}x loop")
    print(f"  batched, each image encoded once {1000 * t_batched / n:7.2f} ms/pair   {t_loop / t_batched:5.1f}x loop"
          f"   {t_noreuse / t_batched:4.2f}x not reused")
    print(f"  same answers all three ways: {same}")
    if not same:
        raise SystemExit("the batched answers differ from the per-pair loop's")
    result = {"arch": args.arch, "size": args.size, "device": args.device, "loop_s": t_loop, "batched_s": t_batched,
              "noreuse_s": t_noreuse, "pairs": n, "batched_questions_per_s": n / t_batched,
              "loop_questions_per_s": n / t_loop}
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
