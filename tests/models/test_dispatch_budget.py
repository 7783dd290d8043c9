"""The kernels a counter launches per (image, class) pair stay within their budget (counted, not timed: the same on
any machine under any load; ``benchmarks/dispatch_budget.py``)."""

import pytest
from tests.fixtures.benchmark_scripts import load_benchmark

from countboard.models.kernel_count import KernelCount

bench = load_benchmark("dispatch_budget")


@pytest.fixture(scope="module", params=["owlv2", "clipseg"])
def deep_counter(request, tmp_path_factory):
    name = request.param
    return name, bench.counter(name, bench.BUILDERS[name](tmp_path_factory.mktemp(name)))


def test_kernels_per_image_within_budget_in_fp32_and_bf16(deep_counter):
    name, model = deep_counter
    fp32 = bench.per_image(model, "fp32", small=1, large=9)
    bf16 = bench.per_image(model, "bf16", small=1, large=9)
    assert 0 < fp32.kernels <= bench.BUDGETS[name], fp32
    assert bf16.kernels <= bench.BF16_OVER_FP32 * fp32.kernels, (fp32, bf16)
    assert fp32.syncs == 0 and bf16.syncs == 0  # the batch's one read happens through to_host, counted once per batch


def test_the_budget_fails_when_images_are_encoded_one_call_each(deep_counter):
    """The per-image loop the device path removed, put back by hand (one image per encoder call), is over budget:
    the test above can fail."""
    name, model = deep_counter
    saved = model.image_batch_size
    model.image_batch_size = 1
    try:
        assert bench.per_image(model, "fp32", small=1, large=3).kernels > bench.BUDGETS[name]
    finally:
        model.image_batch_size = saved


def test_kernel_count_leaves_views_out_and_counts_casts():
    import torch

    with KernelCount() as k:
        x = torch.ones(4, 2).t().reshape(8)
        y = (x.to(torch.float64) + 1).sum()
    assert k.kernels == 5 and k.casts == 1  # ones, clone (the reshape of a transpose), _to_copy, add, sum
    assert float(y) == 16
