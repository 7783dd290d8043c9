"""Oracle and class-blind counters: exact counts from annotations, on items, mosaics and a generated split."""

from __future__ import annotations

import numpy as np
import pytest

from countboard.counting.datasets.mosaic import build_mosaic
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.models.class_blind import ClassBlindCounter
from countboard.counting.models.oracle import OracleCounter
from countboard.items import ImageItem
from countboard.metrics.counting import negative_label_metrics
from countboard.models.base import Counter


def two_class_item() -> ImageItem:
    pts = {"cats": np.array([[1.0, 1.0], [3.5, 6.2], [7.9, 0.0]]), "dogs": np.array([[4.0, 4.0]])}
    return ImageItem("x", np.zeros((8, 8, 3), np.uint8), pts, class_name="cats")


def test_counters_follow_the_interface():
    for counter in (OracleCounter(device="cpu"), ClassBlindCounter(device="cpu")):
        assert isinstance(counter, Counter) and counter.kind == "counter"


def test_oracle_counts_the_prompted_class_only():
    item = two_class_item()
    oracle = OracleCounter()
    maps = oracle.density([item] * 4, ["cats", "dogs", "Cats ", "zebras"])
    assert [float(m.sum()) for m in maps] == [3.0, 1.0, 3.0, 0.0]
    assert all(m.shape == (8, 8) and m.dtype == np.float32 for m in maps)
    assert maps[1][4, 4] == 1.0
    assert not maps[3].any()


def test_class_blind_counts_everything():
    item = two_class_item()
    counts = ClassBlindCounter().count([item] * 3, ["cats", "dogs", "zebras"])
    np.testing.assert_array_equal(counts, [4.0, 4.0, 4.0])


def test_encode_once_decode_many():
    item = two_class_item()
    oracle = OracleCounter()
    (feat,) = oracle.encode_images([item])
    maps = oracle.decode([feat, feat], ["cats", "dogs"])
    assert [float(m.sum()) for m in maps] == [3.0, 1.0]
    with pytest.raises(ValueError, match="one prompt per image"):
        oracle.decode([feat], ["cats", "dogs"])


def test_oracle_on_mosaic_counts_each_half():
    a = ImageItem("a", np.zeros((10, 10, 3), np.uint8), {"cats": np.array([[2.0, 2.0], [8.0, 9.0]])}, class_name="cats")
    b = ImageItem("b", np.zeros((20, 5, 3), np.uint8), {"dogs": np.array([[1.0, 1.0]])}, class_name="dogs")
    mosaic = build_mosaic(a, b)
    up, low = mosaic.split(OracleCounter().density([mosaic.item], ["cats"])[0])
    assert (up, low) == (2.0, 0.0)
    up, low = mosaic.split(ClassBlindCounter().density([mosaic.item], ["cats"])[0])
    assert (up, low) == (2.0, 1.0)


def test_negative_metrics_on_synthetic_shapes(tmp_path):
    ds = SyntheticShapes(tmp_path / "shapes", split="test", image_size=(64, 64), size_range=(5.0, 8.0),
                         count_range=(1, 12), images_per_class={"train": 0, "val": 0, "test": 2},
                         multi_class_images=0)
    items = list(ds)
    classes = ds.classes
    gt = np.array([it.count_of() for it in items])
    pos_idx = np.array([classes.index(it.class_name) for it in items])
    for counter, nmn, pccn in ((OracleCounter(), 0.0, 100.0), (ClassBlindCounter(), 1.0, 0.0)):
        counts = np.array([counter.count([it] * len(classes), classes) for it in items])
        m = negative_label_metrics(counts, gt, pos_idx)
        assert m["nmn"] == pytest.approx(nmn)
        assert m["pccn"] == pytest.approx(pccn)
        assert m["mae"] == 0.0
