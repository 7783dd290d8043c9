"""Grounding DINO preprocessing: transformers' processor on the host against tensor ops on the model's device.

Both run side by side in one process, on the same random images, with the processor settings of
``IDEA-Research/grounding-dino-tiny`` (shortest edge 800, longest 1333, PIL bilinear, ImageNet mean and std):

- ``processor``: ``GroundingDinoImageProcessor`` on one image at a time, then ``.to(device)``: what
  ``GroundingDinoCounter.encode_images`` did before;
- ``device``: ``countboard.models.preprocess.grounding_dino_pixel_values`` on each batch of ``--batch`` same-size
  images (the ``uint8`` pixels go to the device; resize, rescale and normalise run there): what it does now.

The outputs are compared bit for bit. Times are milliseconds per image, the best of ``--repeats`` runs (CUDA
synchronised), with their ratio; on a CPU device both run on the host.

``--encode N`` also times ``GroundingDinoCounter.encode_images`` on the tests' tiny random Grounding DINO
(shortest edge 64, longest 96; ``tests/fixtures/tiny_models.py``) over N images of 256 x 256, against the same
backbone on the processor's pixels, one image at a time (the code before), and compares their features.

    python benchmarks/dino_preprocess.py --sizes 480x640,1080x1920 --batch 4 --threads 2 --device cpu
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch


def _best_ms(fn, repeats: int, n_images: int, device: str) -> float:
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best * 1e3 / n_images


def measure(size: tuple[int, int], batch: int, repeats: int, device: str, processor) -> dict:
    """ms per image of both paths on ``batch`` random ``size`` images, and whether their outputs are equal."""
    from countboard.models.preprocess import grounding_dino_pixel_values

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (*size, 3), dtype=np.uint8) for _ in range(batch)]

    def host() -> list[torch.Tensor]:
        return [processor(images=im, return_tensors="pt")["pixel_values"].to(device) for im in images]

    def on_device() -> torch.Tensor:
        return grounding_dino_pixel_values(images, processor, device)[0]

    equal = torch.equal(torch.cat(host()), on_device())  # also the warm-up (filter taps, lookup table)
    host_ms = _best_ms(host, repeats, batch, device)
    device_ms = _best_ms(on_device, repeats, batch, device)
    out = tuple(on_device().shape[-2:])
    return {"size": f"{size[0]}x{size[1]}", "out": f"{out[0]}x{out[1]}", "processor_ms": host_ms,
            "device_ms": device_ms, "ratio": host_ms / device_ms, "equal": equal}


def measure_encode(n_images: int, repeats: int, device: str) -> dict:
    """ms per image of ``encode_images`` on the tiny model against the processor path, and whether the backbone
    features are equal."""
    import sys
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.fixtures.tiny_models import build_tiny_grounding_dino

    from countboard.counting.models.grounding_dino import GroundingDinoCounter
    from countboard.items import ImageItem

    rng = np.random.default_rng(1)
    items = [ImageItem(image_id=f"img{i}", image=rng.integers(0, 256, (256, 256, 3), dtype=np.uint8))
             for i in range(n_images)]
    with tempfile.TemporaryDirectory() as tmp:
        counter = GroundingDinoCounter(model_id=str(build_tiny_grounding_dino(Path(tmp))), device=device)

    @torch.inference_mode()
    def processor_path() -> list[list[torch.Tensor]]:
        out = []
        for it in items:
            pv = counter.processor.image_processor(images=it.image, return_tensors="pt")["pixel_values"].to(device)
            maps, _ = counter._backbone.inner(pv, torch.ones((1, *pv.shape[-2:]), dtype=torch.long, device=device))
            out.append([f for f, _ in maps])
        return out

    def device_path() -> list[list[torch.Tensor]]:
        return [[f for f, _ in feat.maps] for feat in counter.encode_images(items)]

    equal = all(torch.equal(a, b) for fa, fb in zip(processor_path(), device_path(), strict=True)
                for a, b in zip(fa, fb, strict=True))
    return {"processor_ms": _best_ms(processor_path, repeats, n_images, device),
            "device_ms": _best_ms(device_path, repeats, n_images, device), "equal": equal}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="480x640,640x480,384x576,1080x1920",
                        help="comma list of HxW input sizes")
    parser.add_argument("--batch", type=int, default=4, help="same-size images per device call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--encode", type=int, default=8, help="images for the tiny model's encode_images (0: skip)")
    parser.add_argument("--quick", action="store_true", help="one size, 2 images, one run")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.batch, args.repeats, args.encode = "480x640", 2, 1, 2
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*torchvision.*")
    from transformers import GroundingDinoImageProcessor

    processor = GroundingDinoImageProcessor(size={"shortest_edge": 800, "longest_edge": 1333})
    print(f"device {args.device}, {args.threads} threads, {args.batch} images per size, best of {args.repeats}")
    print(f"{'input':>10} {'resized':>10} {'processor ms/img':>17} {'device ms/img':>14} {'ratio':>6}  equal")
    all_equal = True
    for spec in args.sizes.split(","):
        h, w = (int(v) for v in spec.lower().split("x"))
        r = measure((h, w), args.batch, args.repeats, args.device, processor)
        all_equal &= r["equal"]
        print(f"{r['size']:>10} {r['out']:>10} {r['processor_ms']:17.1f} {r['device_ms']:14.1f} "
              f"{r['ratio']:6.2f}  {r['equal']}")
    if args.encode:
        r = measure_encode(args.encode, args.repeats, args.device)
        all_equal &= r["equal"]
        print(f"encode_images, tiny model, {args.encode} images of 256x256: processor path {r['processor_ms']:.1f} "
              f"ms/img, device path {r['device_ms']:.1f} ms/img, ratio {r['processor_ms'] / r['device_ms']:.2f}, "
              f"features equal {r['equal']}")
    return 0 if all_equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
