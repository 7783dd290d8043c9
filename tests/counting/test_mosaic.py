"""Mosaics: stacking, point offsets, seam split, deterministic partners, density from points."""

from __future__ import annotations

import numpy as np
import pytest

from countboard.counting.datasets.mosaic import (
    build_mosaic,
    class_density,
    mosaic_pairs,
    mosaic_partner,
    points_to_density,
    resize_item,
    split_counts,
)
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.errors import ConfigError
from countboard.items import ImageItem


def item(image_id, cls, h, w, pts, value=0):
    return ImageItem(image_id, np.full((h, w, 3), value, np.uint8), {cls: np.asarray(pts, float)},
                     {cls: np.array([[0.0, 0.0, 2.0, 2.0]])}, cls)


def test_points_to_density_mass_and_clipping():
    d = points_to_density(np.array([[0.0, 0.0], [0.9, 0.9], [5.5, 2.0], [100.0, -3.0]]), (4, 6))
    assert d.sum() == 4.0
    assert d[0, 0] == 2.0 and d[2, 5] == 1.0 and d[0, 5] == 1.0
    assert points_to_density(np.zeros((0, 2)), (3, 3)).sum() == 0.0


def test_resize_scales_points_and_boxes():
    it = item("a", "x", 10, 20, [[10.0, 5.0]])
    small = resize_item(it, (5, 5))
    assert small.image.shape == (5, 5, 3)
    np.testing.assert_allclose(small.points["x"], [[2.5, 2.5]])
    np.testing.assert_allclose(small.boxes["x"], [[0.0, 0.0, 1.0, 0.5]])
    assert resize_item(it, (10, 20)) is it


@pytest.mark.parametrize("orientation", ["vertical", "horizontal"])
def test_build_mosaic(orientation):
    top = item("a", "x", 10, 20, [[1.0, 1.0], [19.0, 9.0]], value=10)
    bottom = item("b", "y", 5, 10, [[1.0, 1.0]], value=200)
    m = build_mosaic(top, bottom, orientation=orientation)
    vertical = orientation == "vertical"
    assert m.item.size == ((20, 20) if vertical else (10, 40))
    assert m.seam == (10 if vertical else 20)
    assert m.item.class_name == "x" and m.item.image_id == "a+b"
    first = m.item.image[:10] if vertical else m.item.image[:, :20]
    second = m.item.image[10:] if vertical else m.item.image[:, 20:]
    assert (first == 10).all() and (second == 200).all()
    np.testing.assert_allclose(m.item.points["y"], [[2.0, 12.0]] if vertical else [[22.0, 2.0]])
    np.testing.assert_allclose(m.item.boxes["y"], [[10, 0, 14, 4]] if vertical else [[0, 20, 4, 24]])
    up, low = m.split(class_density(m.item, "x") + class_density(m.item, "y"))
    assert (up, low) == (2.0, 1.0)


def test_points_on_the_far_border_stay_in_their_half():
    top = item("a", "x", 10, 10, [[10.0, 10.0], [0.0, 10.0]])
    bottom = item("b", "y", 10, 10, [[10.0, 10.0]])
    m = build_mosaic(top, bottom)
    assert m.split(class_density(m.item, "x")) == (2.0, 0.0)
    assert m.split(class_density(m.item, "y")) == (0.0, 1.0)


def test_build_mosaic_tile_size_and_bad_orientation():
    top = item("a", "x", 10, 20, [[1.0, 1.0]])
    m = build_mosaic(top, item("b", "y", 5, 10, [[1.0, 1.0]]), tile_size=(8, 8))
    assert m.item.size == (16, 8) and m.seam == 8
    with pytest.raises(ConfigError, match="orientation"):
        build_mosaic(top, top, orientation="diagonal")


def test_split_counts():
    d = np.arange(12, dtype=float).reshape(4, 3)
    assert split_counts(d, 1) == (3.0, 63.0)
    assert split_counts(d, 2, "horizontal") == (40.0, 26.0)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return SyntheticShapes(tmp_path_factory.mktemp("mosaic") / "shapes", split="test", image_size=(48, 48),
                           size_range=(5.0, 8.0), count_range=(1, 8),
                           images_per_class={"train": 0, "val": 0, "test": 3}, multi_class_images=0)


def test_partner_is_deterministic_and_of_the_other_class(shapes):
    image_id = shapes.image_ids[0]
    for other in shapes.classes[1:]:
        p = mosaic_partner(shapes, image_id, other, seed=0)
        assert shapes.class_of(p) == other
        assert p == mosaic_partner(shapes, image_id, other, seed=0)
    picks = {mosaic_partner(shapes, image_id, shapes.classes[1], seed=s) for s in range(20)}
    assert len(picks) > 1
    with pytest.raises(ConfigError, match="no image of class"):
        mosaic_partner(shapes, image_id, "unicorns", seed=0)


def test_pairs_cover_every_other_class(shapes):
    pairs = mosaic_pairs(shapes)
    assert len(pairs) == len(shapes) * (len(shapes.classes) - 1)
    assert all(shapes.class_of(i) != c for i, c in pairs)


def test_docstring_examples():
    import doctest

    import countboard.counting.datasets.mosaic as mosaic
    import countboard.counting.datasets.synthetic_shapes as synthetic_shapes
    import countboard.counting.models.class_blind as class_blind
    import countboard.counting.models.oracle as oracle

    for module in (mosaic, synthetic_shapes, oracle, class_blind):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
