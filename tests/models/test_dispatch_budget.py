"""The kernels a counter launches per (image, class) pair stay within their budget (counted, not timed: the same on
any machine under any load; ``benchmarks/dispatch_budget.py``)."""

import pytest
import torch
from tests.fixtures.benchmark_scripts import load_benchmark

from countboard.models.kernel_count import KernelCount

bench = load_benchmark("dispatch_budget")


#: Images per class of the two cells each figure is the margin of (the detectors' backbones are slow on a CPU).
SIZES = {"owlv2": (1, 9), "clipseg": (1, 9), "grounding_dino": (1, 5), "omdet_turbo": (1, 5)}


@pytest.fixture(scope="module", params=list(SIZES))
def deep_counter(request, tmp_path_factory):
    name = request.param
    return name, bench.counter(name, bench.BUILDERS[name](tmp_path_factory.mktemp(name)))


def test_kernels_per_image_within_budget_in_fp32_and_bf16(deep_counter):
    name, model = deep_counter
    small, large = SIZES[name]
    fp32 = bench.per_image(model, "fp32", small=small, large=large)
    bf16 = bench.per_image(model, "bf16", small=small, large=large)
    assert 0 < fp32.kernels <= bench.BUDGETS[name], fp32
    assert bf16.kernels <= bench.BF16_OVER_FP32 * fp32.kernels, (fp32, bf16)
    assert fp32.syncs == 0 and bf16.syncs == 0  # the batch's one read happens through to_host, counted once per batch


def test_the_budget_fails_when_images_are_encoded_one_call_each(deep_counter):
    """The per-image loop the device path removed, put back by hand (one image per encoder call), is over budget:
    the test above can fail."""
    name, model = deep_counter
    if not hasattr(model, "image_batch_size"):
        pytest.skip(f"{name}'s backbone runs one image per call by design (float rounding of batched features)")
    saved = model.image_batch_size
    model.image_batch_size = 1
    try:
        assert bench.per_image(model, "fp32", small=1, large=3).kernels > bench.BUDGETS[name]
    finally:
        model.image_batch_size = saved


def _head_per_image(batched):
    """``pair_scores_and_boxes`` one image per call: the detectors' per-image head loop, put back by hand."""

    def per_image(features, prompts):
        groups: dict[int, list[int]] = {}
        for i, f in enumerate(features):
            groups.setdefault(id(f), []).append(i)
        parts = [batched([features[i] for i in idx], [prompts[i] for i in idx]) for idx in groups.values()]
        back = torch.tensor([i for idx in groups.values() for i in idx]).argsort()
        return tuple(torch.cat([p[k] for p in parts])[back] for k in range(2))

    return per_image


def test_the_budget_fails_when_the_head_runs_once_per_image(deep_counter):
    """The detectors' fusion/decoder head once per image (each image's pairs in calls of their own), as before it
    ran over the pairs of many images: over budget, with the same counts."""
    name, model = deep_counter
    if not hasattr(model, "pair_scores_and_boxes"):
        pytest.skip(f"{name} has no detection head over pairs")
    feats = model.encode_images(bench.images(1))
    features, prompts = [f for f in feats for _ in bench.CLASSES], bench.CLASSES * len(feats)
    model.pair_scores_and_boxes = _head_per_image(model.pair_scores_and_boxes)
    try:
        assert bench.per_image(model, "fp32", small=1, large=2).kernels > bench.BUDGETS[name]
        per_image = model.decode_counts(features, prompts)
    finally:
        del model.pair_scores_and_boxes
    assert model.decode_counts(features, prompts).tolist() == per_image.tolist()


def test_kernel_count_leaves_views_out_and_counts_casts():
    import torch

    with KernelCount() as k:
        x = torch.ones(4, 2).t().reshape(8)
        y = (x.to(torch.float64) + 1).sum()
    assert k.kernels == 5 and k.casts == 1  # ones, clone (the reshape of a transpose), _to_copy, add, sum
    assert float(y) == 16
