"""Negative-label test throughput: cached image features + batched prompts against a per-pair loop.

Both modes run on the same counter object and the same (image, class) pairs, side by side in one process:

Each mode, the forward and the null model run once on their shapes before they are timed.

- ``cached``: the code of ``PracoNegative.run_units`` — ``encode_images`` once per batch of images, then one
  ``decode_counts`` call for every (image, class name) pair of the batch;
- ``per_pair``: ``counter.count([image], [class])`` for every pair (the image encoder runs for every pair).

Counters: ``clipseg`` (randomly initialised at the size of CIDAS/clipseg-rd64-refined: ViT-B/16 vision encoder at
352 px, 12-layer text encoder, 3-layer decoder), ``shapecount`` (the trained checkpoint under
``<data-dir>/checkpoints`` when present, else a randomly initialised one: speed does not depend on the weights), and
optionally ``owlv2`` (ViT-B/16 at ``--owl-image-size`` px). Random models are saved to a temporary folder and
loaded back with ``from_pretrained``, the code path of the real checkpoints. The counts of both modes are compared.

Where the time goes, for the cached mode on the same pairs:

- ``forward``: the model alone (its modules on the same inputs, no pre- or post-processing): the bound;
- ``ratio``: cached pairs/s over the forward rate (1.0 = nothing but the model);
- ``host``: the cached mode again with a *null model* — every model module replays its first output for inputs of
  the same shapes, so the post-processing sees real outputs but no model time is spent — per pair: what the
  pipeline costs around the model (preprocessing, embedding lookups, post-processing, Python);
- GPU busy % sampled with NVML while the cached mode runs ("n/a" without a GPU or ``pynvml``), and peak memory
  (CUDA: ``max_memory_allocated``; CPU: the process's peak RSS).

Everything runs under ``countboard.models.precision.numerics(--device, --precision)``, as a sweep job does.
``--precision`` takes a comma list (``fp32,bf16``): each counter is built once and measured in each; the counts of
a precision other than fp32 are compared with the fp32 counts of the same pairs (``within_tolerance``, the
tolerance of ``docs/counters.md``). ``--json PATH`` writes every row, counts included.

    python benchmarks/praco_throughput.py --images 6 --classes 10 --device cpu --precision fp32
    python benchmarks/praco_throughput.py --device cuda --counters owlv2,clipseg --precision fp32,bf16 --json r.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.models.base import Counter
from countboard.models.hf_loading import byte_level_clip_tokenizer
from countboard.models.precision import numerics


def _text_config(tok) -> dict:
    return dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id)


def build_clipseg(tmp: Path, device: str = "cpu") -> Counter:
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation, CLIPSegProcessor, ViTImageProcessor

    from countboard.counting.models.clipseg import ClipSegCounter

    tok = byte_level_clip_tokenizer()
    config = CLIPSegConfig(text_config=_text_config(tok), vision_config=dict(patch_size=16, image_size=224),
                           extract_layers=[3, 6, 9], reduce_dim=64, use_complex_transposed_convolution=True)
    CLIPSegForImageSegmentation(config).save_pretrained(tmp / "clipseg")
    processor = CLIPSegProcessor(image_processor=ViTImageProcessor(size={"height": 352, "width": 352}),
                                 tokenizer=tok)
    processor.save_pretrained(tmp / "clipseg")
    return ClipSegCounter(model_id=str(tmp / "clipseg"), device=device)


def build_owlv2(tmp: Path, image_size: int, device: str = "cpu") -> Counter:
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    from countboard.counting.models.owlv2 import Owlv2Counter

    tok = byte_level_clip_tokenizer()
    config = Owlv2Config(text_config=_text_config(tok),
                         vision_config=dict(patch_size=16, image_size=image_size))
    Owlv2ForObjectDetection(config).save_pretrained(tmp / "owlv2")
    Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": image_size, "width": image_size}),
                   tokenizer=tok).save_pretrained(tmp / "owlv2")
    return Owlv2Counter(model_id=str(tmp / "owlv2"), device=device)


def build_tiny(name: str, tmp: Path, device: str) -> Counter:
    """The tests' tiny random OWLv2 / CLIPSeg (64 px inputs, one or two layers per tower)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.fixtures.tiny_models import build_tiny_clipseg, build_tiny_owlv2

    (tmp / f"tiny_{name}").mkdir()
    if name == "owlv2":
        from countboard.counting.models.owlv2 import Owlv2Counter

        return Owlv2Counter(model_id=str(build_tiny_owlv2(tmp / "tiny_owlv2")), score_threshold=0.5, device=device)
    from countboard.counting.models.clipseg import ClipSegCounter

    return ClipSegCounter(model_id=str(build_tiny_clipseg(tmp / "tiny_clipseg")), mask_threshold=0.5,
                          min_region_frac=0.002, device=device)


def build_shapecount(tmp: Path, data_dir: Path, classes: list[str], device: str = "cpu") -> tuple[Counter, str]:
    from countboard.counting.models.shapecount import (
        ShapeCountArch,
        ShapeCountCounter,
        ShapeCountNet,
        local_checkpoint_path,
        save_checkpoint,
    )

    trained = local_checkpoint_path(data_dir, "aware")
    if trained.is_file():
        return ShapeCountCounter(checkpoint=str(trained), device=device), f"trained ({trained})"
    rng = np.random.default_rng(0)
    table = {c: (v / np.linalg.norm(v)).astype(np.float32) for c, v in zip(classes, rng.normal(size=(len(classes), 384)),
                                                                          strict=True)}
    path = save_checkpoint(tmp / "shapecount.pt", ShapeCountNet(ShapeCountArch()).eval(), "aware", table, {})
    return ShapeCountCounter(checkpoint=str(path), device=device), "random weights"


class _Job:
    """What ``prompt_every_class`` reads of a job: its loader (the items themselves), fixed-size batches, and
    ``queued`` (no checkpoint waits here)."""

    def __init__(self, items, batch_size: int):
        from countboard.batching import Batching

        self.items, self.batching = {it.image_id: it for it in items}, Batching(batch_size, "cpu")

    def load(self, _dataset, uid):
        return self.items[uid]

    def batches(self, items, fn):
        return self.batching.batches(items, fn)

    def queued(self):
        pass


def run_cached(counter: Counter, items, classes, batch_size: int) -> np.ndarray:
    """The negative-label task's own loop (``prompt_every_class``): each batch of images encoded once, every
    (image, class) pair of the batch in one ``decode_counts_later`` call, the next batch queued before this one's
    counts are read."""
    from countboard.counting.tasks.praco import prompt_every_class

    out = prompt_every_class(counter, None, [it.image_id for it in items], list(classes), _Job(items, batch_size),
                             lambda item, counts: {"counts": counts})
    bad = [r for r in out if "counts" not in r]
    if bad:
        raise RuntimeError(f"{len(bad)} images failed: {bad[0]}")
    return np.array([r["counts"] for r in out], dtype=np.float64)


def kernels_per_pair(counter: Counter, items, classes, batch_size: int) -> float:
    """Operators the cached loop dispatches per pair (``models.kernel_count``): the model's own launches
    included, which the null model's host time leaves out."""
    from countboard.models.kernel_count import KernelCount

    with KernelCount() as k:
        run_cached(counter, items, classes, batch_size)
    return k.kernels / (len(items) * len(classes))


def run_per_pair(counter: Counter, items, classes) -> np.ndarray:
    """``counter.count([image], [class])`` for every pair (the image is preprocessed and encoded every time)."""
    return np.array([[float(counter.count([it], [c])[0]) for c in classes] for it in items])


def _clear_text_cache(counter: Counter) -> None:
    """Both modes start without cached prompt embeddings (each then encodes every class name once)."""
    cache = getattr(counter, "_text", None)
    if hasattr(cache, "clear"):
        cache.clear()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def forward_only(name: str, counter: Counter, items, classes, batch_size: int) -> Callable[[], None]:
    """The model's own modules on the inputs the cached mode gives them (prepared here, outside the timing)."""
    if name == "owlv2":
        pixels = counter.processor.image_processor(images=[it.image for it in items], return_tensors="pt")
        pixels = pixels["pixel_values"].to(counter.device)
        queries = counter._text(classes)

        def run() -> None:
            for start in range(0, len(items), batch_size):
                fmap, _ = counter.model.image_embedder(pixel_values=pixels[start:start + batch_size])
                b, gh, gw, d = fmap.shape
                feats = fmap.reshape(b, gh * gw, d)
                counter.model.box_predictor(feats, fmap)
                for f in feats:
                    counter.model.class_predictor(f[None], queries[None])
        return run
    if name == "clipseg":
        from countboard.counting.models.clipseg import decode_reduced, reduced_layers

        pixels = counter.processor.image_processor(images=[it.image for it in items], return_tensors="pt")
        pixels = pixels["pixel_values"].to(counter.device)
        cond = counter._text(classes)
        decoder = counter.model.decoder

        def run() -> None:
            for start in range(0, len(items), batch_size):
                out = counter.model.clip.get_image_features(pixel_values=pixels[start:start + batch_size],
                                                            interpolate_pos_encoding=True, output_hidden_states=True)
                layers = reduced_layers(decoder, [out.hidden_states[i + 1] for i in counter.model.extract_layers])
                for b in range(len(layers[0])):
                    decode_reduced(decoder, [a[b:b + 1] for a in layers], cond)
        return run
    if name == "shapecount":
        from countboard.counting.models.shapecount import images_to_tensor

        images = images_to_tensor(items).to(counter.device)
        text = counter._text(classes)

        def run() -> None:
            for start in range(0, len(items), batch_size):
                feats = counter.net.encode(images[start:start + batch_size])
                for f in feats:
                    counter.net.decode(f[None].expand(len(classes), -1, -1, -1), text)
        return run
    raise ValueError(name)


#: The model entry points each counter calls (an attribute path from the counter, or ``module.<name>`` for a function
#: of the counter's module); the null model replaces them with replays of their first output.
MODEL_CALLS = {"owlv2": [("model", "image_embedder"), ("model", "box_predictor"), ("model", "class_predictor")],
               "clipseg": [("model.clip", "get_image_features"), ("module", "reduced_layers"),
                           ("module", "decode_reduced")],
               "shapecount": [("net", "encode"), ("net", "decode")]}


def _shape_key(x):
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), str(x.dtype))
    if isinstance(x, (list, tuple)):
        return tuple(_shape_key(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _shape_key(v)) for k, v in x.items()))
    return repr(x)


@contextlib.contextmanager
def null_model(name: str, counter: Counter):
    """Every model call of ``counter`` returns the output it gave the first time for inputs of the same shapes."""
    patched = []
    for owner_path, attr in MODEL_CALLS[name]:
        owner = sys.modules[type(counter).__module__] if owner_path == "module" else counter
        for part in () if owner_path == "module" else owner_path.split("."):
            owner = getattr(owner, part)
        real, cache = getattr(owner, attr), {}

        def replay(*args, _real=real, _cache=cache, **kwargs):
            key = _shape_key((args, kwargs))
            if key not in _cache:
                _cache[key] = _real(*args, **kwargs)
            return _cache[key]
        object.__setattr__(owner, attr, replay)
        patched.append((owner, attr, real))
    try:
        yield
    finally:
        for owner, attr, real in patched:
            if isinstance(owner, types.ModuleType):
                setattr(owner, attr, real)
            else:
                del owner.__dict__[attr]


class GpuBusy:
    """Mean NVML utilisation of the GPU while the block runs (None without a GPU or pynvml)."""

    def __init__(self, device: str):
        self.samples: list[int] = []
        self.handle = None
        if device.startswith("cuda"):
            try:
                import os

                import pynvml

                pynvml.nvmlInit()
                visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)
                self.nvml = pynvml
            except Exception:  # no pynvml, no driver: reported as n/a
                self.handle = None
        self._stop = threading.Event()

    def __enter__(self):
        if self.handle is not None:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def __exit__(self, *exc):
        self._stop.set()
        if self.handle is not None:
            self._thread.join()

    @property
    def percent(self) -> str:
        return f"{np.mean(self.samples):.0f}%" if self.samples else "n/a"


def peak_memory(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB (CUDA)"
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (process RSS)"


def candidates_per_pair(counter: Counter, items, classes) -> float | None:
    """OWLv2: the mean number of boxes per pair that NMS decides on (score above the threshold, centre in the
    image) — what the selection's cost grows with (a random model scores most of its boxes highly)."""
    if not hasattr(counter, "_scored"):
        return None
    from countboard.counting.models.detect_count import candidates

    feats = counter.encode_images(items[:1])
    boxes, scores, sizes = counter._scored([feats[0]] * len(classes), list(classes))
    return float(candidates(boxes, scores, sizes, counter.score_threshold).sum(dim=1).double().mean())


#: How far a half-precision count may be from the fp32 count of the same pair (docs/counters.md, "Devices and
#: precision"): one object, or 10 % of the fp32 count where that is more.
COUNT_TOLERANCE_ABS, COUNT_TOLERANCE_REL = 1.0, 0.10


def within_tolerance(counts: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per pair: is ``counts`` within the documented tolerance of the fp32 ``reference``?

    >>> within_tolerance(np.array([3.0, 21.0, 30.0]), np.array([2.0, 20.0, 20.0])).tolist()
    [True, True, False]
    """
    reference = np.asarray(reference, dtype=np.float64)
    bound = np.maximum(COUNT_TOLERANCE_ABS, COUNT_TOLERANCE_REL * np.abs(reference))
    return np.abs(np.asarray(counts, dtype=np.float64) - reference) <= bound + 1e-9


def compare_counts(counts, reference) -> dict:
    """How a precision's counts differ from the fp32 counts of the same pairs."""
    counts, reference = np.asarray(counts, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    diff = np.abs(counts - reference)
    return {"pairs": int(diff.size), "changed": int((np.round(counts) != np.round(reference)).sum()),
            "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()),
            "within_tolerance": int(within_tolerance(counts, reference).sum())}


def measure(name: str, counter: Counter, items, classes, batch_size: int, device: str, repeats: int = 1) -> dict:
    """``repeats``: runs of the cached mode and of the forward, timed together (a longer window for GPU busy %)."""
    # warm-up on the shapes each mode then runs (lazy inits, the allocator, oneDNN's kernels for each new shape), as
    # the forward bound is warmed on its own
    run_cached(counter, items, classes, batch_size)
    run_per_pair(counter, items[:1], classes[:1])
    _clear_text_cache(counter)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    _sync(device)
    with GpuBusy(device) as busy:
        t0 = time.perf_counter()
        for _ in range(repeats):
            cached = run_cached(counter, items, classes, batch_size)
        _sync(device)
        t1 = time.perf_counter()
    _clear_text_cache(counter)
    per_pair = run_per_pair(counter, items, classes)
    _sync(device)
    t2 = time.perf_counter()
    forward = forward_only(name, counter, items, classes, batch_size)
    forward()  # warm-up on these shapes
    _sync(device)
    t3 = time.perf_counter()
    for _ in range(repeats):
        forward()
    _sync(device)
    t4 = time.perf_counter()
    with null_model(name, counter):
        run_cached(counter, items, classes, batch_size)  # records each call's output once
        _sync(device)
        t5 = time.perf_counter()
        run_cached(counter, items, classes, batch_size)
        _sync(device)
        t6 = time.perf_counter()
    pairs = len(items) * len(classes)
    cached_s, forward_s = (t1 - t0) / repeats, (t4 - t3) / repeats
    return {"counter": name, "pairs": pairs, "cached_s": cached_s, "per_pair_s": t2 - t1,
            "cached_pairs_per_s": pairs / cached_s, "per_pair_pairs_per_s": pairs / (t2 - t1),
            "speedup": (t2 - t1) / cached_s, "max_count_diff": float(np.abs(cached - per_pair).max()),
            "forward_pairs_per_s": pairs / forward_s, "ratio": forward_s / cached_s,
            "host_ms_per_pair": 1e3 * (t6 - t5) / pairs,
            "kernels_per_pair": kernels_per_pair(counter, items, classes, batch_size), "gpu_busy": busy.percent, "peak": peak_memory(device),
            "candidates": candidates_per_pair(counter, items, classes), "counts": cached.ravel().tolist()}


def _build(name: str, args, tmp: Path, classes, parser) -> tuple[Counter, str]:
    if name in ("clipseg", "owlv2") and args.size == "tiny":
        return build_tiny(name, tmp, args.device), "tiny random model of the tests"
    if name == "clipseg":
        return build_clipseg(tmp, args.device), "random weights, clipseg-rd64-refined size"
    if name == "owlv2":
        return build_owlv2(tmp, args.owl_image_size, args.device), f"random weights, B/16 @ {args.owl_image_size}"
    if name == "shapecount":
        return build_shapecount(tmp, Path(args.data_dir), classes, args.device)
    parser.error(f"unknown counter {name!r}")


def _print_row(row: dict) -> None:
    vs = row.get("vs_fp32")
    print(f"{row['counter']:<11} ({row['note']}; {row['device']}, {row['precision']}): cached "
          f"{row['cached_pairs_per_s']:8.2f} pairs/s | per-pair {row['per_pair_pairs_per_s']:8.2f} pairs/s | speedup "
          f"{row['speedup']:5.1f}x | max |count diff| {row['max_count_diff']:.2e}\n{'':<11} model-only forward "
          f"{row['forward_pairs_per_s']:8.2f} pairs/s | cached/forward {row['ratio']:.2f} | host (null "
          f"model) {row['host_ms_per_pair']:.3f} ms/pair | kernels {row['kernels_per_pair']:.1f}/pair | GPU busy {row['gpu_busy']} | peak {row['peak']}"
          + ("" if row["candidates"] is None else
             f"\n{'':<11} NMS candidates per pair (score above threshold, centre in image): {row['candidates']:.0f}")
          + ("" if vs is None else
             f"\n{'':<11} vs fp32: {vs['changed']} of {vs['pairs']} rounded counts changed, max |d| "
             f"{vs['max_abs_diff']:.2f}, mean |d| {vs['mean_abs_diff']:.3f}, {vs['within_tolerance']} of "
             f"{vs['pairs']} within tolerance"),
          flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=6, help="test images (one per class, in dataset order)")
    parser.add_argument("--classes", type=int, default=10, help="synthetic shape classes = prompts per image")
    parser.add_argument("--counters", default="clipseg,shapecount", help="comma list of clipseg, shapecount, owlv2")
    parser.add_argument("--owl-image-size", type=int, default=960)
    parser.add_argument("--batch-size", type=int, default=8, help="images per encode_images call (cached mode)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of the cached mode and of the forward, timed together (GPU busy %% over longer)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--quick", action="store_true", help="2 images x 5 classes, CLIPSeg only")
    parser.add_argument("--size", choices=("full", "tiny"), default="full",
                        help="full: random models at the real architectures' size; tiny: the tests' tiny random "
                             "OWLv2 and CLIPSeg (tests/fixtures/tiny_models.py)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--precision", default="fp32",
                        help="fp32, tf32, bf16 or fp16 (as the sweep key), or a comma list of them")
    parser.add_argument("--json", default=None, help="also write every row (counts included) to this file")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA device")
    if args.quick:
        args.images, args.classes, args.counters = 2, 5, "clipseg"
    precisions = args.precision.split(",")
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ds = SyntheticShapes(tmp / "shapes", split="test", n_classes=args.classes)
        classes = ds.classes
        items = [ds.load(i) for i in ds.image_ids[: args.images]]
        print(f"{len(items)} images x {len(classes)} prompts = {len(items) * len(classes)} pairs; "
              f"torch threads {torch.get_num_threads()}")
        for name in args.counters.split(","):
            counter, note = _build(name, args, tmp, classes, parser)
            for precision in precisions:
                with torch.inference_mode(), numerics(args.device, precision):
                    row = measure(name, counter, items, classes, args.batch_size, args.device, args.repeats)
                row.update(note=note, device=args.device, precision=precision, batch_size=args.batch_size,
                           images=len(items), classes=len(classes))
                reference = next((r for r in rows if r["counter"] == name and r["precision"] == "fp32"), None)
                if precision != "fp32" and reference is not None:
                    row["vs_fp32"] = compare_counts(row["counts"], reference["counts"])
                rows.append(row)
                _print_row(row)
            del counter
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
