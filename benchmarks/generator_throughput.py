"""The diffusers generator as the sweep runs it, against the pipeline's own batched call and the UNet's own rate.

One randomly initialised Stable Diffusion pipeline (built in-process from small configs, saved and loaded back
with ``from_pretrained``, the code path of real checkpoints; nothing is downloaded) generates the same prompts x
seeds four ways, side by side in one process, in images/s:

- ``sweep``: ``GeckoNumAutoEval.images`` with an ``image_dir`` (what a ``geckonum_autoeval`` job runs to make
  its images: ``DiffusersGenerator.generate_batch`` per batch of ``--batch`` images, every image saved as it is
  made, so that a killed job resumes at the next image);
- ``generator``: ``DiffusersGenerator.generate_batch`` alone (no saving);
- ``pipeline``: the pipeline's own batched call, ``pipe(prompt=[...], num_inference_steps, guidance_scale,
  output_type="np")`` with one seeded generator per batch;
- ``unet``: the UNet alone on the same batch (with classifier-free guidance, two rows per image), ``--steps``
  forward passes per batch: the bound.

Each path runs ``--repeats`` times, interleaved with the others, and its best time counts.

``--size sd15`` is Stable Diffusion 1.5's architecture (860 M-parameter UNet, 512 px, 77-token CLIP ViT-L text
encoder; random weights saved in float16), the size of the GPU targets.

It prints the rates and the ratios pipeline / sweep (the target is at most 1.2) and unet / pipeline (``--json PATH``
also writes them). Everything runs
under ``countboard.models.precision.numerics(--device, --precision)`` as a sweep job does; ``--dtype`` is the
model's ``dtype`` (``float16`` by default on CUDA, as the presets; half precision falls back to float32 on CPU).

    PYTHONPATH=src:. python benchmarks/generator_throughput.py --device cpu --images 8 --batch 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' tiny-model builders

from tests.fixtures.tiny_models import build_sd15_size, build_tiny_sd  # noqa: E402

from countboard.models.precision import numerics  # noqa: E402
from countboard.numeracy.datasets.prompts import Entity, PromptSet, PromptSpec  # noqa: E402
from countboard.numeracy.models.diffusers_generator import DiffusersGenerator  # noqa: E402
from countboard.numeracy.release import image_id  # noqa: E402
from countboard.numeracy.tasks.geckonum import GeckoNumAutoEval  # noqa: E402

SIZES = {  # image px, UNet block widths, VAE blocks (latents = px / 2**(blocks - 1))
    "tiny": (16, (8, 16), 2),
    "small": (256, (32, 64), 4),
    "wide": (512, (32, 64), 4),
    "sd15": (512, None, 4),  # Stable Diffusion 1.5's architecture (build_sd15_size)
}
NOUNS = ("red circle", "blue square", "green triangle", "yellow star")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(device: str, fn) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def _specs(n: int) -> list[PromptSpec]:
    return [PromptSpec(i, f"{i % 5 + 2} {NOUNS[i % 4]}s.", "numeric_simple", (Entity(NOUNS[i % 4], str(i % 5 + 2)),))
            for i in range(n)]


def unet_seconds(pipe, batch: int, steps: int, guidance: float, height: int, width: int, device: str) -> float:
    """Seconds of ``steps`` UNet forwards on one batch (two rows per image with guidance), inputs made outside."""
    unet = pipe.unet
    rows = batch * (2 if guidance > 1 else 1)
    scale = 2 ** (len(pipe.vae.config.block_out_channels) - 1)
    latents = torch.randn(rows, unet.config.in_channels, height // scale, width // scale, device=device,
                          dtype=unet.dtype)
    text = torch.randn(rows, pipe.tokenizer.model_max_length, unet.config.cross_attention_dim, device=device,
                       dtype=unet.dtype)
    pipe.scheduler.set_timesteps(steps)
    timesteps = pipe.scheduler.timesteps.to(device)

    def run():
        with torch.inference_mode():
            for t in timesteps:
                unet(latents, t, encoder_hidden_states=text)

    run()  # warm-up
    return _timed(device, run)


def measure(args: argparse.Namespace) -> dict[str, float]:
    px, channels, vae_blocks = SIZES[args.size]
    height = width = args.image_size or px
    tmp = Path(tempfile.mkdtemp(prefix="gen-bench-"))
    if args.size == "sd15":
        build_sd15_size(tmp / "sd")
    else:
        build_tiny_sd(tmp / "sd", image_size=height, unet_channels=channels, vae_blocks=vae_blocks)
    gen = DiffusersGenerator(str(tmp / "sd"), dtype=args.dtype, steps=args.steps, guidance=args.guidance,
                             height=height, width=width, local_files_only=True, device=args.device,
                             batch_size=args.batch)
    specs = _specs(args.images)
    seeds = [0]
    pairs = [(s, seed) for s in specs for seed in seeds]
    n = len(pairs)
    pipe = gen.pipe
    first = pairs[:args.batch]  # warm-up of both calls at the batch's shapes (kernels, allocator, lazy set-up)
    gen.generate_batch([p for p, _ in first], [s for _, s in first])
    with torch.inference_mode():
        pipe(prompt=[p.prompt for p, _ in first], num_inference_steps=args.steps, guidance_scale=args.guidance,
             output_type="np", height=height, width=width)

    def run_pipeline():
        with torch.inference_mode():
            for start in range(0, n, args.batch):
                chunk = pairs[start:start + args.batch]
                g = torch.Generator(device="cpu" if args.device == "cpu" else args.device).manual_seed(start)
                pipe(prompt=[p.prompt for p, _ in chunk], num_inference_steps=args.steps,
                     guidance_scale=args.guidance, generator=g, output_type="np", height=height, width=width)

    def run_generator():
        for start in range(0, n, args.batch):
            chunk = pairs[start:start + args.batch]
            gen.generate_batch([p for p, _ in chunk], [s for _, s in chunk])

    def run_sweep():
        image_dir = Path(tempfile.mkdtemp(dir=tmp, prefix="images-"))
        task = GeckoNumAutoEval(evaluator={"_target_": "countboard.counting.models.oracle.OracleCounter"},
                                seeds=seeds, image_dir=str(image_dir))
        task.images(gen, PromptSet(specs), [image_id(p.prompt_id, s) for p, s in pairs])

    best: dict[str, float] = {}
    for _ in range(args.repeats):  # interleaved, best of each: the machine's other load hits every path alike
        for name, fn in (("pipeline", run_pipeline), ("sweep", run_sweep), ("generator", run_generator)):
            best[name] = min(best.get(name, float("inf")), _timed(args.device, fn))
        per_batch = unet_seconds(pipe, args.batch, args.steps, args.guidance, height, width, args.device)
        best["unet"] = min(best.get("unet", float("inf")), per_batch * n / args.batch)
    rates = {name: n / seconds for name, seconds in best.items()}
    images = [im.image for im in gen.generate_batch([p for p, _ in pairs[:args.batch]], [0] * min(n, args.batch))]
    for level in (6, 1):  # the host's cost of saving one image: PIL's default level (before) and the writer's
        rates[f"png{level}_ms"] = 1000 * _png_seconds(images, level) / len(images)
    return rates


def _png_seconds(images: list, level: int) -> float:
    import io

    from PIL import Image

    t0 = time.perf_counter()
    for image in images:
        Image.fromarray(image).save(io.BytesIO(), format="PNG", compress_level=level)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="fp32", help="the sweep's precision key (autocast for bf16/fp16)")
    parser.add_argument("--dtype", default=None, help="the model's dtype (default float16, as the presets)")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--image-size", type=int, default=None, help="override the size's image side in px")
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--guidance", type=float, default=7.5)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each path, interleaved; the best counts")
    parser.add_argument("--quick", action="store_true", help="tiny pipeline, 4 images, 2 steps")
    parser.add_argument("--json", default=None, help="also write the rates and the run's settings to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.images, args.batch, args.steps, args.repeats, args.threads = "tiny", 4, 2, 2, 2, 1
    args.dtype = args.dtype or "float16"
    torch.set_num_threads(args.threads)
    with numerics(args.device, args.precision):
        rates = measure(args)
    px = args.image_size or SIZES[args.size][0]
    print(f"device={args.device} precision={args.precision} dtype={args.dtype} size={args.size} ({px} px) "
          f"images={args.images} batch={args.batch} steps={args.steps} guidance={args.guidance}")
    print("| path | images/s |")
    print("|---|---|")
    for name in ("sweep", "generator", "pipeline", "unet"):
        print(f"| {name} | {rates[name]:.3f} |")
    print(f"pipeline / sweep = {rates['pipeline'] / rates['sweep']:.3f} (target <= 1.2); "
          f"generator / sweep = {rates['generator'] / rates['sweep']:.3f}; "
          f"unet / pipeline = {rates['unet'] / rates['pipeline']:.3f}")
    if args.quick:
        print("--quick checks the script: its calls take milliseconds, too short for the ratios to mean anything")
    print(f"saving one image as PNG on the host: level 6 {rates['png6_ms']:.1f} ms, level 1 {rates['png1_ms']:.1f} ms "
          f"(the pipeline's time per image: {1000 / rates['pipeline']:.1f} ms)")
    if args.json:
        settings = {k: getattr(args, k) for k in ("device", "precision", "dtype", "size", "images", "batch", "steps",
                                                  "guidance", "repeats")}
        Path(args.json).write_text(json.dumps({**settings, "image_px": px, "rates": rates,
                                               "pipeline_over_sweep": rates["pipeline"] / rates["sweep"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
