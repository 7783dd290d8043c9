"""Device preprocessing against the transformers processors it replaces (generated images, several sizes)."""

import numpy as np
import pytest
import torch
from PIL import Image

from countboard.models.preprocess import (
    owlv2_pixel_values,
    pil_bilinear_coefficients,
    pil_bilinear_resize,
    vit_pixel_values,
)

#: The tests' fixture sizes and the benchmark's image size, resized to the tiny models' 64 px and CLIPSeg's 352.
SIZES = [(40, 64), (64, 48), (56, 56), (256, 256), (300, 517)]


def _images(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for hw in sizes]


def test_pil_coefficients_hand_case():
    """Halving 4 samples: output 0 is centred at 1.0 with the triangle widened to 2 samples each side, read at
    0.5, 1.5, 2.5 (weights 0.75, 0.75, 0.25, normalised by 1.75); output 1 mirrors it."""
    k = pil_bilinear_coefficients(4, 2) / 2**22
    np.testing.assert_allclose(k, [[3 / 7, 3 / 7, 1 / 7, 0], [0, 1 / 7, 3 / 7, 3 / 7]], atol=1e-6)
    assert pil_bilinear_coefficients(4, 2).sum(axis=1).tolist() == [2**22, 2**22]


@pytest.mark.parametrize("out", [(64, 64), (352, 352)])
def test_pil_resize_equals_pil_on_the_fixture_sizes(out):
    for im in _images(SIZES):
        ref = np.array(Image.fromarray(im).resize((out[1], out[0]), Image.BILINEAR, reducing_gap=None))
        got = pil_bilinear_resize(torch.from_numpy(im).permute(2, 0, 1)[None], out)[0].permute(1, 2, 0)
        np.testing.assert_array_equal(got.numpy().astype(np.uint8), ref)


def test_pil_resize_is_within_one_level_on_any_size():
    """Pillow's reference C code, reproduced here, runs the horizontal pass first; the installed wheel differs from
    it by one uint8 level at some pixels of some size pairs (where both axes are resampled)."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        hw, out = tuple(int(v) for v in rng.integers(3, 200, 2)), tuple(int(v) for v in rng.integers(3, 200, 2))
        im = rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
        ref = np.array(Image.fromarray(im).resize((out[1], out[0]), Image.BILINEAR, reducing_gap=None))
        got = pil_bilinear_resize(torch.from_numpy(im).permute(2, 0, 1)[None], out)[0].permute(1, 2, 0).numpy()
        assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1


@pytest.mark.parametrize("size", [64, 352])
def test_vit_pixel_values_equal_the_processor(size):
    from transformers import ViTImageProcessor

    processor = ViTImageProcessor(size={"height": size, "width": size})
    images = _images(SIZES, seed=size)
    ref = processor(images=images, return_tensors="pt")["pixel_values"]
    got = vit_pixel_values(images, processor, "cpu")
    assert got.dtype == ref.dtype and got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


@pytest.mark.parametrize("size", [64, 160])
def test_owlv2_pixel_values_equal_the_processor_to_float_rounding(size):
    """scipy stores float32 after each axis and accumulates in float64; the device path multiplies by the combined
    float64 matrix in float32. Both are the same linear map: the difference is float rounding (<= 1e-5 here,
    against 1/255/0.27 = 1.5e-2 for one uint8 level of the input)."""
    from transformers import Owlv2ImageProcessor

    processor = Owlv2ImageProcessor(size={"height": size, "width": size})
    images = _images(SIZES[:4], seed=size)  # square and non-square: padding, shrinking and growing
    ref = processor(images=images, return_tensors="pt")["pixel_values"]
    got = owlv2_pixel_values(images, processor, "cpu")
    assert got.shape == ref.shape
    assert float((got - ref).abs().max()) <= 1e-5


def test_autocast_does_not_reach_the_pixels():
    from transformers import ViTImageProcessor

    processor = ViTImageProcessor(size={"height": 64, "width": 64})
    images = _images(SIZES[:2])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = vit_pixel_values(images, processor, "cpu")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, processor(images=images, return_tensors="pt")["pixel_values"], rtol=0, atol=0)


def test_unsupported_settings_use_the_processor():
    from transformers import ViTImageProcessor

    processor = ViTImageProcessor(size={"height": 64, "width": 64}, resample=Image.BICUBIC)
    images = _images(SIZES[:2])
    torch.testing.assert_close(vit_pixel_values(images, processor, "cpu"),
                               processor(images=images, return_tensors="pt")["pixel_values"], rtol=0, atol=0)


def test_transfer_round_trips_dtypes():
    from countboard.models.transfer import to_host

    tensors = [torch.tensor([3, 4]), torch.tensor([[0.1, 0.2]], dtype=torch.float64), torch.tensor(True),
               torch.tensor([0.5], dtype=torch.float32)]
    out = to_host(tensors)
    assert [a.dtype for a in out] == [np.int64, np.float64, np.bool_, np.float32]
    for a, t in zip(out, tensors, strict=True):
        np.testing.assert_array_equal(a, t.numpy())
