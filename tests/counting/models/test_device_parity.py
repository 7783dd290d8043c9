"""On a CUDA device, in the default precision, counters count exactly what they count on the CPU (GPU only)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from countboard.counting.models.clipseg import ClipSegCounter
from countboard.counting.models.owlv2 import Owlv2Counter
from countboard.models.precision import numerics

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PROMPTS = ["red circle", "blue square", "apples"]
DEVICES = ("cpu", "cuda")


def _counts(counter, items, device):
    with torch.inference_mode(), numerics(device, "fp32"):
        maps = counter.density([it for it in items for _ in PROMPTS], PROMPTS * len(items))
    return np.array([float(m.sum()) for m in maps])


@pytest.mark.parametrize("kind", ["owlv2", "clipseg"])
def test_cuda_counts_equal_cpu_counts_in_fp32(kind, tiny_owlv2_dir, tiny_clipseg_dir, make_items):
    items = make_items(4, seed=13)
    if kind == "owlv2":
        build = lambda device: Owlv2Counter(model_id=str(tiny_owlv2_dir), score_threshold=0.5, device=device)  # noqa: E731
    else:
        build = lambda device: ClipSegCounter(model_id=str(tiny_clipseg_dir), mask_threshold=0.5,  # noqa: E731
                                              min_region_frac=0.002, device=device)
    cpu = _counts(build("cpu"), items, "cpu")
    cuda = _counts(build("cuda"), items, "cuda")
    # a map's sum is a float32 sum of unit masses spread over each instance's pixels (CLIPSeg: 1/area per pixel of
    # a region), so its last bits depend on the summation order; the count it stands for is whole and must be equal
    np.testing.assert_array_equal(np.rint(cuda), np.rint(cpu))
    np.testing.assert_allclose(cuda, cpu, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(_counts(build("cuda"), items, "cuda"), cuda)  # and the same on a second run


@pytest.mark.parametrize("kind", ["owlv2", "clipseg", "grounding_dino"])
def test_cuda_decode_counts_equal_cpu_counts_in_fp32(kind, tiny_owlv2_dir, tiny_clipseg_dir, tiny_grounding_dino_dir,
                                                     make_items):
    """The counts-only path: tensor preprocessing, NMS over the ranked candidates and region labelling by hooking on
    the GPU; the processors' arithmetic, greedy NMS and scipy's labelling on the CPU."""
    from countboard.counting.models.grounding_dino import GroundingDinoCounter

    items = make_items(5, seed=17, sizes=((40, 64), (64, 48), (300, 517)))  # the tiny DINO needs no square
    builders = {
        "owlv2": lambda device: Owlv2Counter(model_id=str(tiny_owlv2_dir), score_threshold=0.5, device=device),
        "clipseg": lambda device: ClipSegCounter(model_id=str(tiny_clipseg_dir), mask_threshold=0.5,
                                                 min_region_frac=0.002, device=device),
        "grounding_dino": lambda device: GroundingDinoCounter(model_id=str(tiny_grounding_dino_dir),
                                                              box_threshold=0.6, text_threshold=0.25, device=device)}
    pairs = [it for it in items for _ in PROMPTS], PROMPTS * len(items)
    counts = {}
    for device in DEVICES:
        with torch.inference_mode(), numerics(device, "fp32"):
            counts[device] = np.asarray(builders[kind](device).count(*pairs), dtype=np.float64)
    assert counts["cpu"].sum() > 0
    np.testing.assert_array_equal(counts["cuda"], counts["cpu"])
    np.testing.assert_allclose(counts["cpu"], _counts(builders[kind]("cpu"), items, "cpu"), atol=1e-3)


def test_pinned_batch_copy_equals_the_images(make_items):
    """The batch gathered in page-locked memory and copied without waiting holds the images (read after a sync)."""
    from countboard.models.preprocess import images_tensor

    images = [it.image for it in make_items(3, seed=4, sizes=((40, 64),))]
    got = images_tensor(images, "cuda")
    torch.cuda.synchronize()
    np.testing.assert_array_equal(got.permute(0, 2, 3, 1).cpu().numpy(), np.stack(images))
