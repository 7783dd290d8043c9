"""Mosaics of two single-class images (PrACo mosaic test) and point-annotation density maps.

A mosaic stacks a positive image (top, or left) and a negative image (bottom, or right), both resized to the same
tile size; the predicted density map is split at the seam into the positive and negative counts.

Two presets (``MOSAIC_PRESETS``): ``default`` (the project's: tiles of the positive image's size, bilinear,
partners drawn per pair with a seeded generator, either orientation) and ``official`` (as the PrACo authors build
them: a square collage whose side is the smaller of the two heights, each image resized with PIL's default filter
to side x side/2, positive on top, partners drawn with Python's ``random`` seeded with 123). Partners can also be
read from the release's ``mosaic_image_pairs.csv`` (``read_pairs_file``).
"""

from __future__ import annotations

import csv
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageDataset, ImageItem

ORIENTATIONS = ("vertical", "horizontal")
MOSAIC_PRESETS = ("default", "official")
#: Seed of Python's ``random`` with which the PrACo authors draw the negative images.
OFFICIAL_SEED = 123


def points_to_density(points: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``(H, W)`` float32 map with unit mass at the pixel of each ``(x, y)`` point (clipped to the map).

    Example:
        >>> points_to_density(np.array([[1.5, 0.2], [9.0, 9.0]]), (4, 4)).nonzero()
        (array([0, 3]), array([1, 3]))
    """
    h, w = size
    out = np.zeros((h, w), dtype=np.float32)
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(pts) == 0:
        return out
    xs = np.clip(np.floor(pts[:, 0]).astype(int), 0, w - 1)
    ys = np.clip(np.floor(pts[:, 1]).astype(int), 0, h - 1)
    np.add.at(out, (ys, xs), 1.0)
    return out


def class_density(item: ImageItem, class_name: str) -> np.ndarray:
    """Ground-truth density of ``class_name`` in ``item`` (zero map when the class is not annotated)."""
    return points_to_density(item.points.get(class_name, np.zeros((0, 2))), item.size)


def resize_item(item: ImageItem, size: tuple[int, int], resample: int | None = Image.BILINEAR) -> ImageItem:
    """``item`` resized to ``(H, W)`` with its points and boxes scaled to match (``resample=None``: PIL's default
    filter, as ``Image.resize`` without the argument)."""
    h, w = item.size
    new_h, new_w = int(size[0]), int(size[1])
    if (new_h, new_w) == (h, w):
        return item
    img = Image.fromarray(item.image)
    image = np.asarray(img.resize((new_w, new_h)) if resample is None else img.resize((new_w, new_h), resample))
    sx, sy = new_w / w, new_h / h
    points = {c: np.asarray(p, np.float64).reshape(-1, 2) * [sx, sy] for c, p in item.points.items()}
    boxes = {c: np.asarray(b, np.float64).reshape(-1, 4) * [sy, sx, sy, sx] for c, b in item.boxes.items()}
    return ImageItem(item.image_id, image, points, boxes, item.class_name)


#: Between the positive and the negative image's ids in a mosaic's ``image_id`` (``mosaic_parts`` reads it).
MOSAIC_ID_SEP = "+"


def mosaic_parts(image_id: str) -> tuple[str, str] | None:
    """``(positive id, negative id)`` of a mosaic's ``image_id`` made by :func:`build_mosaic`; None for an image id
    that is not a mosaic's. Ids that themselves hold the separator are not told apart (FSC-147 and PrACo++ ids do not).

    Example:
        >>> mosaic_parts("12.jpg+345.jpg"), mosaic_parts("12.jpg")
        (('12.jpg', '345.jpg'), None)
    """
    positive, sep, negative = str(image_id).partition(MOSAIC_ID_SEP)
    return (positive, negative) if sep and positive and negative else None


@dataclass
class Mosaic:
    """A mosaic image and where its halves meet.

    Attributes:
        item: The stacked image, with the points of both halves (negative-half points offset past the seam).
        seam: Row (vertical) or column (horizontal) where the negative half starts.
        orientation: ``vertical`` (positive on top) or ``horizontal`` (positive on the left).
        positive_id: Image id of the positive half.
        negative_id: Image id of the negative half.
    """

    item: ImageItem
    seam: int
    orientation: str
    positive_id: str
    negative_id: str

    def split(self, density: np.ndarray) -> tuple[float, float]:
        """Counts of ``density`` on the positive and the negative half."""
        return split_counts(density, self.seam, self.orientation)


def split_counts(density: np.ndarray, seam: int, orientation: str = "vertical") -> tuple[float, float]:
    """Sum of a map before and after ``seam`` along rows (vertical) or columns (horizontal).

    Example:
        >>> split_counts(np.ones((4, 3)), 2)
        (6.0, 6.0)
    """
    axis = 0 if orientation == "vertical" else 1
    first, second = np.split(np.asarray(density, np.float64), [seam], axis=axis)
    return float(first.sum()), float(second.sum())


def build_mosaic(positive: ImageItem, negative: ImageItem, orientation: str = "vertical",
                 tile_size: tuple[int, int] | None = None, resample: int | None = Image.BILINEAR) -> Mosaic:
    """Stack ``positive`` and ``negative`` after resizing both to ``tile_size`` (default: the positive's size).

    Example:
        >>> a = ImageItem("a", np.zeros((4, 6, 3), np.uint8), {"x": np.array([[1.0, 1.0]])}, class_name="x")
        >>> b = ImageItem("b", np.zeros((8, 3, 3), np.uint8), {"y": np.array([[2.0, 4.0]])}, class_name="y")
        >>> m = build_mosaic(a, b)
        >>> m.item.size, m.seam, m.item.points["y"].tolist()
        ((8, 6), 4, [[4.0, 6.0]])
    """
    if orientation not in ORIENTATIONS:
        raise ConfigError(f"mosaic orientation {orientation!r}: use one of {ORIENTATIONS}")
    size = tuple(tile_size) if tile_size is not None else positive.size
    top, bottom = resize_item(positive, size, resample), resize_item(negative, size, resample)
    vertical = orientation == "vertical"
    seam = size[0] if vertical else size[1]
    offset = np.array([0.0, seam]) if vertical else np.array([seam, 0.0])
    box_offset = np.array([seam, 0, seam, 0.0]) if vertical else np.array([0, seam, 0, seam])
    image = np.concatenate([top.image, bottom.image], axis=0 if vertical else 1)
    points = {c: _inside(p, size) for c, p in top.points.items()}
    boxes = {c: np.asarray(b, np.float64).reshape(-1, 4) for c, b in top.boxes.items()}
    for c, p in bottom.points.items():
        shifted = _inside(p, size) + offset
        points[c] = np.concatenate([points[c], shifted]) if c in points else shifted
    for c, b in bottom.boxes.items():
        shifted = np.asarray(b, np.float64).reshape(-1, 4) + box_offset
        boxes[c] = np.concatenate([boxes[c], shifted]) if c in boxes else shifted
    item = ImageItem(f"{positive.image_id}{MOSAIC_ID_SEP}{negative.image_id}", image, points, boxes,
                     positive.class_name)
    return Mosaic(item, seam, orientation, positive.image_id, negative.image_id)


def _inside(points: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Points clipped into their tile, so that a point on the far border does not cross the seam."""
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    return np.clip(pts, 0.0, [size[1] - 1e-3, size[0] - 1e-3])


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def mosaic_partner(dataset: ImageDataset, image_id: str, other_class: str, seed: int) -> str:
    """The negative image of the mosaic ``(image_id, other_class)``: an image of ``other_class`` drawn with a
    generator seeded by ``(seed, image_id, other_class)``, so it does not depend on the order of evaluation."""
    candidates = dataset.images_of(other_class)
    if not candidates:
        raise ConfigError(f"no image of class {other_class!r} in the dataset split; choose classes that have images")
    rng = np.random.default_rng([seed, _stable_hash(image_id), _stable_hash(other_class)])
    return candidates[int(rng.integers(len(candidates)))]


def mosaic_pairs(dataset: ImageDataset, classes: list[str] | None = None) -> list[tuple[str, str]]:
    """``(image_id, other_class)`` for each image and each class of ``classes`` (default: the split's) but its own."""
    classes = dataset.classes if classes is None else classes
    return [(i, c) for i in dataset.image_ids for c in classes if c != dataset.class_of(i)]


def build_official_mosaic(positive: ImageItem, negative: ImageItem) -> Mosaic:
    """The PrACo authors' collage: side = the smaller height, both images resized (PIL's default filter) to
    ``side x side // 2`` (width x height), positive on top.

    Example:
        >>> a = ImageItem("a", np.zeros((40, 60, 3), np.uint8), class_name="x")
        >>> b = ImageItem("b", np.zeros((30, 20, 3), np.uint8), class_name="y")
        >>> m = build_official_mosaic(a, b)
        >>> m.item.size, m.seam
        ((30, 30), 15)
    """
    side = min(positive.size[0], negative.size[0])
    return build_mosaic(positive, negative, "vertical", (side // 2, side), resample=None)


def official_partners(dataset: ImageDataset, classes: list[str], seed: int = OFFICIAL_SEED) -> dict[tuple[str, str], str]:
    """``{(image, other class): negative image}``: Python's ``random`` seeded once with ``seed``, one
    ``random.choice`` among the images of each other class, images in dataset order and classes in ``classes``
    order (the release's own pairs are in its ``mosaic_image_pairs.csv``: use ``read_pairs_file`` to match it)."""
    rng = random.Random(seed)
    wanted = set(classes)
    out = {}
    for image_id in dataset.image_ids:
        if dataset.class_of(image_id) not in wanted:
            continue
        for other in classes:
            if other != dataset.class_of(image_id):
                candidates = dataset.images_of(other)
                if candidates:
                    out[(image_id, other)] = rng.choice(candidates)
    return out


def read_pairs_file(path: str | Path) -> dict[tuple[str, str], str]:
    """``mosaic_image_pairs.csv`` (rows: positive image, columns: negative class, cell: negative image file)."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(path, "task.pairs_file", "Give the release's mosaic_image_pairs.csv or null.")
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ConfigError(f"{path}:1: empty file; expected a header row of class names")
    header = rows[0][1:]
    return {(row[0].strip(), cls): cell.strip() for row in rows[1:] for cls, cell in zip(header, row[1:], strict=False)
            if cell.strip() and cell.strip().lower() != "nan"}
