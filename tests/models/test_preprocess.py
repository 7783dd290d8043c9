"""Device preprocessing against the transformers processors it replaces (generated images, several sizes)."""

import numpy as np
import pytest
import torch
from PIL import Image

from countboard.models.preprocess import (
    grounding_dino_pixel_values,
    owlv2_pixel_values,
    pil_bilinear_coefficients,
    pil_bilinear_resize,
    pil_vertical_first,
    shortest_edge_size,
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


def _direct_coefficients(in_size, out_size):
    """Resample.c's precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter, in plain loops."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    out = np.zeros((out_size, in_size))
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - filterscale + 0.5), 0)
        xmax = min(int(center + filterscale + 0.5), in_size) - xmin
        weights = [max(0.0, 1.0 - abs((x + xmin - center + 0.5) * (1.0 / filterscale))) for x in range(xmax)]
        total = 0.0
        for w in weights:
            total += w
        for x, w in enumerate(weights):
            out[xx, xmin + x] = int(0.5 + w / total * 2**22)
    return out


def test_pil_coefficients_equal_the_direct_loops():
    rng = np.random.default_rng(1)
    pairs = [tuple(int(v) for v in rng.integers(1, 1500, 2)) for _ in range(40)] + [(640, 1066), (1920, 1333)]
    for in_size, out_size in pairs:
        np.testing.assert_array_equal(pil_bilinear_coefficients(in_size, out_size),
                                      _direct_coefficients(in_size, out_size))


def _pil(im, out):
    return np.array(Image.fromarray(im).resize((out[1], out[0]), Image.BILINEAR, reducing_gap=None))


def _resize(im, out):
    return pil_bilinear_resize(torch.from_numpy(im).permute(2, 0, 1)[None], out)[0].permute(1, 2, 0).numpy()


def test_pil_resize_equals_pil_on_any_size():
    """Random size pairs (growing, shrinking, mixed), and pairs where both axes shrink, the height by more than
    twice the width's pixels: there the installed Pillow (13) runs the vertical pass first, and the other order
    differs by one level at a fifth of the pixels."""
    rng = np.random.default_rng(3)
    pairs = [(tuple(int(v) for v in rng.integers(3, 200, 2)), tuple(int(v) for v in rng.integers(3, 200, 2)))
             for _ in range(30)]
    pairs += [((98, 37), (42, 34)), ((162, 19), (38, 49)), ((70, 69), (9, 46)), ((300, 40), (120, 20))]
    for hw, out in pairs:
        im = rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
        np.testing.assert_array_equal(_resize(im, out).astype(np.uint8), _pil(im, out), err_msg=f"{hw} -> {out}")


def test_pil_pass_order():
    import PIL

    if int(PIL.__version__.split(".")[0]) < 13:
        pytest.skip("the order rule of Pillow >= 13")
    assert pil_vertical_first((100, 100), (20, 79)) and not pil_vertical_first((100, 100), (20, 60))
    assert not pil_vertical_first((100, 100), (120, 20))  # the height grows: horizontal first
    assert pil_vertical_first((100, 20), (50, 40))  # the width grows, the height shrinks


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


def test_owlv2_pixel_values_of_one_batch_of_same_size_images():
    """One size group (the whole batch in two matrix products, returned as it is), with and without padding."""
    from transformers import Owlv2ImageProcessor

    processor = Owlv2ImageProcessor(size={"height": 48, "width": 48})
    for shape in ((30, 52), (40, 40)):
        images = _images([shape] * 3, seed=shape[0])
        ref = processor(images=images, return_tensors="pt")["pixel_values"]
        got = owlv2_pixel_values(images, processor, "cpu")
        assert got.shape == ref.shape and got.is_contiguous()
        assert float((got - ref).abs().max()) <= 1e-5


#: Portrait, landscape, square, small (upscaled), large (downscaled, both ways), long and thin (longest edge binds).
DINO_SIZES = [(64, 48), (40, 64), (56, 56), (20, 30), (300, 517), (517, 300), (200, 20)]


@pytest.fixture(scope="module")
def dino_processor(tiny_grounding_dino_dir):
    """The tests' tiny Grounding DINO's processor (shortest edge 64, longest 96), as the counter loads it."""
    from transformers import GroundingDinoProcessor

    return GroundingDinoProcessor.from_pretrained(str(tiny_grounding_dino_dir)).image_processor


def test_shortest_edge_size_hand_cases():
    assert shortest_edge_size((480, 640), 800, 1333) == (800, 1066)  # 640 * 800 / 480 = 1066.7, truncated
    assert shortest_edge_size((640, 480), 800, 1333) == (1066, 800)
    assert shortest_edge_size((400, 1600), 800, 1333) == (333, 1333)  # 3200 > 1333: the longest edge binds
    assert shortest_edge_size((800, 900), 800, 1333) == (800, 900)  # already there
    assert shortest_edge_size((20, 30), 64, None) == (64, 96)
    # 64 / 40 * 64 = 102.4 > 96: the short side becomes round(96 * 40 / 64) = 60, the long one 60 * 64 / 40 = 96
    assert shortest_edge_size((40, 64), 64, 96) == (60, 96)
    assert shortest_edge_size((200, 20), 64, 96) == (96, 10)  # round(9.6) = 10; 9.6 * 200 / 20 = 96


def test_grounding_dino_pixel_values_equal_the_processor(dino_processor):
    """One size per call (the counter's use: no padding) and all sizes in one call (padded, with the mask)."""
    images = _images(DINO_SIZES, seed=5)
    for batch in [[im] for im in images] + [images]:
        ref = dino_processor(images=batch, return_tensors="pt")
        pixels, mask = grounding_dino_pixel_values(batch, dino_processor, "cpu")
        assert pixels.dtype == ref["pixel_values"].dtype and pixels.shape == ref["pixel_values"].shape
        torch.testing.assert_close(pixels, ref["pixel_values"], rtol=0, atol=0)
        torch.testing.assert_close(mask, ref["pixel_mask"], rtol=0, atol=0)
    assert [tuple(grounding_dino_pixel_values([im], dino_processor, "cpu")[0].shape[-2:]) for im in images] == [
        (85, 64), (60, 96), (64, 64), (64, 96), (56, 96), (96, 56), (96, 10)]


def test_grounding_dino_pixel_values_at_the_model_size_and_padded_to_pad_size():
    """The real model's 800 / 1333 on two small images (upscaled), and a fixed ``pad_size``."""
    from transformers import GroundingDinoImageProcessor

    images = _images([(30, 40), (45, 20)], seed=6)
    for processor in (GroundingDinoImageProcessor(),
                      GroundingDinoImageProcessor(size={"shortest_edge": 64, "longest_edge": 96},
                                                  pad_size={"height": 100, "width": 100})):
        ref = processor(images=images, return_tensors="pt")
        pixels, mask = grounding_dino_pixel_values(images, processor, "cpu")
        torch.testing.assert_close(pixels, ref["pixel_values"], rtol=0, atol=0)
        torch.testing.assert_close(mask, ref["pixel_mask"], rtol=0, atol=0)


def test_grounding_dino_unsupported_settings_and_images_use_the_processor(dino_processor):
    from transformers import GroundingDinoImageProcessor

    bicubic = GroundingDinoImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}, resample=Image.BICUBIC)
    images = _images(DINO_SIZES[:2], seed=7)
    wide_ints = [np.random.default_rng(8).integers(0, 256, (40, 50, 3), dtype=np.int64)]  # not uint8
    for processor, batch in ((bicubic, images), (dino_processor, wide_ints)):
        pixels, mask = grounding_dino_pixel_values(batch, processor, "cpu")
        ref = processor(images=batch, return_tensors="pt")
        torch.testing.assert_close(pixels, ref["pixel_values"], rtol=0, atol=0)
        torch.testing.assert_close(mask, ref["pixel_mask"], rtol=0, atol=0)


def test_autocast_does_not_reach_the_pixels():
    from transformers import ViTImageProcessor

    processor = ViTImageProcessor(size={"height": 64, "width": 64})
    images = _images(SIZES[:2])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = vit_pixel_values(images, processor, "cpu")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, processor(images=images, return_tensors="pt")["pixel_values"], rtol=0, atol=0)


def test_autocast_does_not_reach_the_grounding_dino_pixels(dino_processor):
    images = _images(DINO_SIZES[:2])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pixels, _ = grounding_dino_pixel_values(images, dino_processor, "cpu")
    assert pixels.dtype == torch.float32
    torch.testing.assert_close(pixels, dino_processor(images=images, return_tensors="pt")["pixel_values"],
                               rtol=0, atol=0)


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
