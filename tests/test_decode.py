"""The one image decoder (``countboard.decode``): files of every Pillow mode give the pixels of their 8-bit twin.

Each test writes real files (PNG, TIFF, JPEG) of a synthetic-shapes image in one mode and reads them back through
the dataset loaders (FSC-147 layout, PairTally, PrACo++, CountBench bytes, grounding samples), comparing with the
8-bit picture the file holds (equal, or within one level of rounding).
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from countboard.counting.datasets.fsc147 import ANNOTATION_FILE, IMAGE_DIR, FSC147Dataset
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.decode import check_points, decode_image, rgb_array
from countboard.items import GroundingSample


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("decode") / "shapes"
    SyntheticShapes(root, split="test", n_classes=2, image_size=(64, 80), images_per_class={"test": 2},
                    multi_class_images=0, count_range=(3, 9))
    return root


@pytest.fixture(scope="module")
def rgb(shapes) -> np.ndarray:
    """The 8-bit picture of the first test image, as stored (JPEG decoded once)."""
    first = sorted((shapes / IMAGE_DIR).iterdir())[0]
    return np.asarray(Image.open(first).convert("RGB"))


def _png16(array: np.ndarray) -> bytes:
    """A 16-bit PNG (grey ``(H, W)`` or RGB ``(H, W, 3)``, 48-bit) written by hand: Pillow writes neither RGB."""
    h, w = array.shape[:2]
    colour = 2 if array.ndim == 3 else 0
    rows = array.astype(">u2").reshape(h, -1)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 16, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _save(image: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _grey(rgb: np.ndarray) -> np.ndarray:
    return np.asarray(Image.fromarray(rgb).convert("L"))


def _twins(rgb: np.ndarray) -> dict[str, tuple[bytes, np.ndarray, str]]:
    """``name -> (file bytes, the 8-bit RGB it holds, the mode Pillow opens it in)``."""
    g = _grey(rgb)
    g3 = np.repeat(g[..., None], 3, axis=2)
    g16 = g.astype(np.uint16) * 257
    opaque = np.full(g.shape, 255, np.uint8)
    palette = Image.fromarray(rgb).quantize(16)
    pal_rgb = np.asarray(palette.convert("RGB"))
    idx = np.asarray(palette)
    pal_expect = np.where((idx == 0)[..., None], 255, pal_rgb).astype(np.uint8)
    return {
        "RGB": (_save(Image.fromarray(rgb), "PNG"), rgb, "RGB"),
        "L": (_save(Image.fromarray(g), "PNG"), g3, "L"),
        "I;16 (16-bit grey PNG)": (_save(Image.fromarray(g16), "PNG"), g3, "I;16"),
        "I;16B (TIFF)": (_save(Image.fromarray(g16.astype(">u2")), "TIFF"), g3, "I;16B"),
        "I;16 (PNG written by hand)": (_png16(g16), g3, "I;16"),
        "I (32-bit TIFF)": (_save(Image.fromarray(g16.astype(np.int32)), "TIFF"), g3, "I"),
        "F (float TIFF in 0..1)": (_save(Image.fromarray((g / 255.0).astype(np.float32)), "TIFF"), g3, "F"),
        "LA (opaque)": (_save(Image.fromarray(np.dstack([g, opaque]), "LA"), "PNG"), g3, "LA"),
        "RGBA (opaque)": (_save(Image.fromarray(np.dstack([rgb, opaque]), "RGBA"), "PNG"), rgb, "RGBA"),
        "P with a transparent index": (_save(palette, "PNG", transparency=0), pal_expect, "P"),
        "CMYK (TIFF)": (_save(Image.fromarray(rgb).convert("CMYK"), "TIFF"), rgb, "CMYK"),
        "48-bit RGB PNG": (_png16(rgb.astype(np.uint16) * 257), rgb, "RGB"),
    }


TWINS = ["RGB", "L", "I;16 (16-bit grey PNG)", "I;16B (TIFF)", "I;16 (PNG written by hand)", "I (32-bit TIFF)",
         "F (float TIFF in 0..1)", "LA (opaque)", "RGBA (opaque)", "P with a transparent index", "CMYK (TIFF)",
         "48-bit RGB PNG"]


@pytest.mark.parametrize("name", TWINS)
def test_every_mode_decodes_to_its_8bit_twin(rgb, name):
    data, expect, mode = _twins(rgb)[name]
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == mode  # the file really is of that mode
        assert np.asarray(im.convert("RGB")).dtype == np.uint8
    got = decode_image(data, name=name)
    assert got.dtype == np.uint8 and got.shape == rgb.shape
    assert np.abs(got.astype(int) - expect.astype(int)).max() <= 1, name


def test_convert_rgb_clips_sixteen_bit_where_the_decoder_does_not(rgb):
    """The fault the decoder exists for: ``convert("RGB")`` makes a 16-bit grey image white."""
    data, expect, _ = _twins(rgb)["I;16 (16-bit grey PNG)"]
    clipped = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert (clipped == 255).mean() > 0.9
    assert np.array_equal(decode_image(data), expect)


def test_fsc147_loader_reads_every_mode_as_its_twin(shapes, rgb, tmp_path):
    """The FSC-147-layout loader over files replaced by each twin: the same pixels and points."""
    import shutil

    root = tmp_path / "fsc"
    shutil.copytree(shapes, root)
    ids = json.loads((root / "Train_Test_Val_FSC_147.json").read_text())["test"]
    first = sorted(ids)[0]
    for name, (data, expect, _) in _twins(rgb).items():
        (root / IMAGE_DIR / first).write_bytes(data)
        item = FSC147Dataset(root, split="test", exclude=None).load(first)
        assert np.abs(item.image.astype(int) - expect.astype(int)).max() <= 1, name
        assert item.count_of() > 0


def test_alpha_is_composited_over_white():
    la = Image.fromarray(np.dstack([np.zeros((2, 2), np.uint8), np.array([[0, 255], [128, 255]], np.uint8)]), "LA")
    out = rgb_array(la)[..., 0]
    assert out.tolist() == [[255, 0], [127, 0]]


def test_float_outside_unit_range_is_stretched_and_nonfinite_fails():
    f = Image.fromarray(np.array([[-2.0, 0.0], [2.0, 6.0]], np.float32))
    assert rgb_array(f)[..., 0].tolist() == [[0, 64], [128, 255]]
    with pytest.raises(ValueError, match="NaN or infinite"):
        rgb_array(Image.fromarray(np.array([[np.nan, 0.0]], np.float32)))


def test_int32_beyond_sixteen_bits_uses_the_int32_range():
    i = Image.fromarray(np.array([[-(2 ** 31), 2 ** 31 - 1]], np.int32))
    assert rgb_array(i)[..., 0].tolist() == [[0, 255]]


def test_exif_orientation_is_not_applied(rgb):
    """Stored pixels, as the reference loaders read them (the annotations are in stored coordinates)."""
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    data = _save(Image.fromarray(rgb), "PNG", exif=exif)
    with Image.open(io.BytesIO(data)) as im:
        assert im.getexif().get(0x0112) == 6
    assert np.array_equal(decode_image(data), rgb)


def test_points_outside_the_decoded_image_fail_the_image(shapes, tmp_path):
    import shutil

    root = tmp_path / "fsc"
    shutil.copytree(shapes, root)
    ann = json.loads((root / ANNOTATION_FILE).read_text())
    first = sorted(json.loads((root / "Train_Test_Val_FSC_147.json").read_text())["test"])[0]
    ann[first]["points_per_class"] = {c: [[500.0, 10.0]] + p for c, p in ann[first]["points_per_class"].items()}
    (root / ANNOTATION_FILE).write_text(json.dumps(ann))
    ds = FSC147Dataset(root, split="test", exclude=None)
    with pytest.raises(ValueError, match=rf"{first}: point \(500, 10\) of .* is outside the 80 x 64 image"):
        ds.load(first)
    others = [i for i in ds.image_ids if i != first]
    assert ds.load(others[0]).image.shape == (64, 80, 3)


def test_points_on_the_edge_are_inside():
    check_points({"a": np.array([[80.0, 64.0], [0.0, 0.0], [80.9, -0.5]])}, (64, 80), "x")
    with pytest.raises(ValueError, match="outside"):
        check_points({"a": np.array([[np.nan, 3.0]])}, (64, 80), "x")


def test_other_loaders_use_the_decoder(rgb, tmp_path):
    """PairTally, PrACo++, CountBench and grounding samples read a 16-bit file as its twin."""
    from countboard.counting.datasets.countbench import CountBenchDataset
    from countboard.counting.datasets.pairtally import PairTallyDataset
    from countboard.counting.datasets.praco_multiclass import (
        PracoMulticlassDataset,
        write_synthetic_multiclass,
    )
    from tests.fixtures.count_datasets import write_countbench, write_pairtally

    data, expect, _ = _twins(rgb)["I;16 (16-bit grey PNG)"]
    pt = write_pairtally(tmp_path / "pt", n=2)
    name = sorted((pt / "images").iterdir())[0]
    name.write_bytes(data)
    assert np.array_equal(PairTallyDataset(pt).load(name.name).image, expect)

    mc = write_synthetic_multiclass(tmp_path / "mc", n_images=2, image_size=(64, 80))
    first = sorted((mc / "images").iterdir())[0]
    first.write_bytes(data)
    assert np.array_equal(PracoMulticlassDataset(mc).load(first.name).image, expect)

    sample = tmp_path / "g.png"
    sample.write_bytes(data)
    assert np.array_equal(GroundingSample("s", "x", (0, 0, 1, 1), image_path=sample).load_image(), expect)

    cb = write_countbench(tmp_path / "cb", n=2)
    import pandas as pd

    frame = pd.read_parquet(cb / "data" / "test-00000-of-00001.parquet")
    frame.at[0, "image"] = {"bytes": data, "path": "0.png"}
    frame.to_parquet(cb / "data" / "test-00000-of-00001.parquet")
    ds = CountBenchDataset(cb)
    assert np.array_equal(ds.load(ds.image_ids[0]).image, expect)
