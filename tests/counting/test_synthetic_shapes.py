"""Synthetic shapes: deterministic generation, exact annotations, FSC-147 layout, drawing helpers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from countboard.counting.datasets import fsc147
from countboard.counting.datasets.synthetic_shapes import (
    SHAPE_CLASSES,
    SceneStyle,
    ShapesConfig,
    SyntheticShapes,
    draw_objects,
    generate,
    render_scene,
)
from countboard.errors import ConfigError

SMALL = dict(n_classes=8, image_size=(96, 96), images_per_class={"train": 2, "val": 1, "test": 2},
             multi_class_images=6, count_range=(1, 25), size_range=(8.0, 14.0))


@pytest.fixture(scope="module")
def shapes_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes") / "synthetic_shapes"
    SyntheticShapes(root, split="test", **SMALL)
    return root


def test_layout_and_splits(shapes_root):
    for name in fsc147.METADATA_FILES:
        assert (shapes_root / name).is_file()
    test = SyntheticShapes(shapes_root, split="test", **SMALL)
    train = SyntheticShapes(shapes_root, split="train", **SMALL)
    assert len(test) == 2 * 8
    assert len(train) == 2 * 8 + 6
    assert test.classes == list(SHAPE_CLASSES)[:8]
    assert all(len(test.images_of(c)) == 2 for c in test.classes)
    splits = json.loads((shapes_root / fsc147.SPLITS_FILE).read_text())
    assert sorted(splits) == ["test", "train", "val"]
    assert not set(splits["train"]) & set(splits["test"])


def test_annotations_are_exact(shapes_root):
    test = SyntheticShapes(shapes_root, split="test", **SMALL)
    for image_id in test.image_ids:
        item = test.load(image_id)
        assert item.image.shape == (96, 96, 3) and item.image.dtype == np.uint8
        assert list(item.points) == [item.class_name]
        n = item.count_of()
        assert 1 <= n <= 25 and n == test.count_of(image_id)
        assert item.boxes[item.class_name].shape == (n, 4)
        pts = item.points[item.class_name]
        assert (pts >= 0).all() and (pts[:, 0] < 96).all() and (pts[:, 1] < 96).all()
    np.testing.assert_array_equal(test.counts, [test.count_of(i) for i in test.image_ids])


def test_train_has_multi_class_images(shapes_root):
    train = SyntheticShapes(shapes_root, split="train", **SMALL)
    multi = [train.load(i) for i in train.image_ids[-6:]]
    assert all(2 <= len(it.points) <= 3 for it in multi)
    for it in multi:
        main = max(it.points, key=lambda c: len(it.points[c]))
        assert it.class_name == main
        assert it.count_of("no such class") == 0
        assert len(it.all_points) == sum(len(p) for p in it.points.values())


def test_generation_is_deterministic(tmp_path, shapes_root):
    cfg = ShapesConfig(seed=0, **{k: v for k, v in SMALL.items() if k not in ("size_range",)},
                       style=SceneStyle(size_range=(8.0, 14.0)))
    other = generate(tmp_path / "again", cfg)
    a = json.loads((shapes_root / fsc147.ANNOTATION_FILE).read_text())
    b = json.loads((other / fsc147.ANNOTATION_FILE).read_text())
    assert a == b
    first = sorted((shapes_root / fsc147.IMAGE_DIR).iterdir())[0].name
    assert (shapes_root / fsc147.IMAGE_DIR / first).read_bytes() == (other / fsc147.IMAGE_DIR / first).read_bytes()
    reseeded = generate(tmp_path / "seed1", ShapesConfig(seed=1, **{k: v for k, v in SMALL.items()
                                                                     if k != "size_range"}))
    c = json.loads((reseeded / fsc147.ANNOTATION_FILE).read_text())
    assert a != c


def test_root_with_other_settings_is_refused(shapes_root):
    with pytest.raises(ConfigError, match="other settings"):
        SyntheticShapes(shapes_root, split="test", **{**SMALL, "seed": 5})


def test_unknown_split_is_refused(shapes_root):
    with pytest.raises(ConfigError, match="split 'bogus'"):
        SyntheticShapes(shapes_root, split="bogus", **SMALL)


def test_draw_objects_paints_class_colour_at_centres():
    canvas = np.full((64, 80, 3), 255, np.uint8)
    centers = np.array([[20.0, 20.0], [60.0, 40.0]])
    boxes = draw_objects(canvas, "blue squares", centers, 14)
    assert boxes.shape == (2, 4)
    for (x, y), (y0, x0, y1, x1) in zip(centers, boxes, strict=True):
        np.testing.assert_array_equal(canvas[int(y), int(x)], SHAPE_CLASSES["blue squares"][1])
        assert y0 <= y <= y1 and x0 <= x <= x1 and y1 - y0 == 14
    assert (canvas[0, 79] == 255).all()


def test_draw_objects_unknown_class():
    with pytest.raises(ConfigError, match="known classes: red circles"):
        draw_objects(np.zeros((8, 8, 3), np.uint8), "unicorns", np.zeros((1, 2)), 4)


@pytest.mark.parametrize("overlap", [0.0, 0.5])
def test_render_scene_counts_and_spacing(overlap):
    rng = np.random.default_rng(3)
    scene = render_scene({"red circles": 30, "green triangles": 5}, (128, 128), rng,
                         SceneStyle(size_range=(8.0, 12.0), overlap=overlap, clutter=1.0))
    assert {c: len(p) for c, p in scene.points.items()} == {"red circles": 30, "green triangles": 5}
    pts = np.concatenate(list(scene.points.values()))
    dist = np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1)) + np.eye(len(pts)) * 1e9
    assert dist.min() >= (1 - overlap) * 4.0 - 1e-9
