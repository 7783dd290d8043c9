"""FSC-147 in its official layout (also written by ``synthetic_shapes``, so one loader reads both).

Layout under ``root``::

    images_384_VarV2/<image_id>          images (FSC-147: 384 px high JPEGs)
    annotation_FSC147_384.json           {image_id: {"points": [[x, y], ...],
                                                     "box_examples_coordinates": [[[x0, y0], [x0, y1],
                                                                                   [x1, y1], [x1, y0]], ...],
                                                     "H": ..., "W": ...}}
    ImageClasses_FSC147.txt              "<image_id>\\t<class name>" per line
    Train_Test_Val_FSC_147.json          {"train": [ids], "val": [ids], "test": [ids], ...}
    Split_Classes_FSC147.json            {"train": [classes], "val": [classes], "test": [classes]}

Annotations may also carry ``points_per_class`` and ``boxes_per_class`` (``{class: [...]}``, boxes as
``[y0, x0, y1, x1]``) for images with several annotated classes; FSC-147 itself annotates one class per image.
An image without ``points`` takes its count from ``gt_cnts_FSC147.json`` when the root has it; otherwise the
dataset refuses it (never a silent count of 0).

By default the 38 test images that hold more than one category (PrACo's exclusion list, bundled with the package)
are left out: ``exclude="praco"``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from countboard.decode import check_points, decode_image
from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageDataset, ImageItem
from countboard.resources import PRACO_EXCLUSION_FILE

IMAGE_DIR = "images_384_VarV2"
ANNOTATION_FILE = "annotation_FSC147_384.json"
CLASSES_FILE = "ImageClasses_FSC147.txt"
SPLITS_FILE = "Train_Test_Val_FSC_147.json"
SPLIT_CLASSES_FILE = "Split_Classes_FSC147.json"
GT_COUNTS_FILE = "gt_cnts_FSC147.json"
#: ``exclude`` value naming the bundled list of PrACo's 38 multi-class test images.
PRACO_EXCLUSION = "praco"
METADATA_FILES = (ANNOTATION_FILE, CLASSES_FILE, SPLITS_FILE, SPLIT_CLASSES_FILE)

HOW_TO_GET = (
    "FSC-147 is published at https://github.com/cvlab-stonybrook/LearningToCountEverything (images: "
    "FSC147_384_V2.zip, which unpacks to images_384_VarV2/; annotation_FSC147_384.json, ImageClasses_FSC147.txt, "
    "Train_Test_Val_FSC_147.json from the repository's data/ folder; Split_Classes_FSC147.json lists the "
    "classes of each split). Unpack them all into one folder and point `dataset.root` at it."
)


def read_class_file(path: Path) -> dict[str, str]:
    """``ImageClasses_FSC147.txt`` as ``{image_id: class name}``."""
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        image_id, sep, name = line.partition("\t")
        if not sep:
            raise ConfigError(f"{path}:{n}: expected '<image id><TAB><class name>', got {line!r}")
        out[image_id.strip()] = name.strip()
    return out


def _box_from_corners(corners: Sequence[Sequence[float]]) -> list[float]:
    arr = np.asarray(corners, dtype=np.float64).reshape(-1, 2)
    return [arr[:, 1].min(), arr[:, 0].min(), arr[:, 1].max(), arr[:, 0].max()]


def image_stem(image_id: str) -> str:
    """``290.jpg`` and ``290`` both give ``290`` (exclusion lists name images with or without ``.jpg``)."""
    image_id = str(image_id).strip()
    return image_id[:-4] if image_id.lower().endswith(".jpg") else image_id


def read_exclusion(exclude: str | Path | Sequence[str] | None, root: Path) -> set[str]:
    """Stems (``image_stem``) of the image ids to leave out: ``"praco"`` (the bundled list), a list, or a text file
    (one id per line, with or without ``.jpg``, ``#`` comments; relative to ``root``)."""
    if exclude is None:
        return set()
    if isinstance(exclude, (str, Path)):
        path = PRACO_EXCLUSION_FILE if str(exclude) == PRACO_EXCLUSION else Path(exclude)
        path = path if path.is_absolute() else root / path
        if not path.is_file():
            raise DataNotFoundError(path, "dataset.exclude",
                                    "Give a text file with one image id per line, or a list of ids, or null.")
        lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
        return {image_stem(line) for line in lines if line}
    return {image_stem(i) for i in exclude}


def _has_points(ann: dict) -> bool:
    return "points" in ann or "points_per_class" in ann


class ListedSplitDataset(ImageDataset):
    """An ``ImageDataset`` whose split keeps its image ids in ``_ids`` and its classes in ``_classes``, in order."""

    _ids: list[str]
    _classes: list[str]

    @property
    def image_ids(self) -> list[str]:
        return list(self._ids)

    @property
    def classes(self) -> list[str]:
        return list(self._classes)


class FSC147Dataset(ListedSplitDataset):
    """One split of FSC-147 (or of a dataset written in its layout).

    Args:
        root: Folder holding the layout above.
        split: Key of ``Train_Test_Val_FSC_147.json`` (``train``, ``val``, ``test``, ``val_coco``, ``test_coco``).
        exclude: Image ids to leave out: ``"praco"`` (default: the bundled list of the 38 multi-class test images),
            a list, a text file (ids with or without ``.jpg``), or ``None``.
        images_per_class: Keep the first ``k`` images of each class (a small, balanced split).
        max_images: Keep the first ``n`` images after the other filters.
        check_files: Check at construction that every selected image file exists.

    Example:
        >>> ds = FSC147Dataset("data/FSC147_384_V2", split="test")  # doctest: +SKIP
        >>> item = ds[0]; item.class_name, item.count_of()  # doctest: +SKIP
        ('sea shells', 8)
    """

    name = "fsc147"

    def __init__(self, root: str | Path, split: str = "test",
                 exclude: str | Path | Sequence[str] | None = PRACO_EXCLUSION,
                 images_per_class: int | None = None, max_images: int | None = None, check_files: bool = True):
        self.root = Path(root)
        self.split = split
        self._check_metadata()
        splits = json.loads((self.root / SPLITS_FILE).read_text())
        if split not in splits:
            raise ConfigError(f"split {split!r} is not in {self.root / SPLITS_FILE}; "
                              f"set `dataset.split` to one of {sorted(splits)}")
        self._annotations: dict = json.loads((self.root / ANNOTATION_FILE).read_text())
        self._class_of = read_class_file(self.root / CLASSES_FILE)
        split_classes = json.loads((self.root / SPLIT_CLASSES_FILE).read_text())
        excluded = read_exclusion(exclude, self.root)
        ids = [i for i in splits[split] if image_stem(i) not in excluded]
        gt_file = self.root / GT_COUNTS_FILE
        self._gt_counts: dict = json.loads(gt_file.read_text()) if gt_file.is_file() else {}
        self._check_annotated(ids)
        if images_per_class is not None:
            seen: dict[str, int] = {}
            kept = []
            for i in ids:
                c = self._class_of[i]
                if seen.get(c, 0) < images_per_class:
                    kept.append(i)
                    seen[c] = seen.get(c, 0) + 1
            ids = kept
        if max_images is not None:
            ids = ids[:max_images]
        self._ids = ids
        present = {self._class_of[i] for i in ids}
        listed = [c for c in split_classes.get(split, []) if c in present]
        self._classes = listed + sorted(present - set(listed))
        self._by_class: dict[str, list[str]] = {c: [] for c in self._classes}
        for i in ids:
            self._by_class[self._class_of[i]].append(i)
        if check_files:
            self._check_images()

    def _check_metadata(self) -> None:
        if not self.root.is_dir():
            raise DataNotFoundError(self.root, "dataset.root",
                                    f"Expected {IMAGE_DIR}/ and {', '.join(METADATA_FILES)} there. {HOW_TO_GET}")
        missing = [f for f in METADATA_FILES if not (self.root / f).is_file()]
        if missing:
            raise DataNotFoundError(self.root, "dataset.root",
                                    f"Missing {', '.join(missing)} (expected {', '.join(METADATA_FILES)} and "
                                    f"{IMAGE_DIR}/). {HOW_TO_GET}")

    def _check_annotated(self, ids: Sequence[str]) -> None:
        no_ann = [i for i in ids if i not in self._annotations]
        no_cls = [i for i in ids if i not in self._class_of]
        no_count = [i for i in ids if i in self._annotations and not _has_points(self._annotations[i])
                    and i not in self._gt_counts]
        if no_count:
            raise ConfigError(
                f"{len(no_count)} image(s) of split {self.split!r} have no `points` in {self.root / ANNOTATION_FILE} "
                f"and no count in {GT_COUNTS_FILE} (e.g. {no_count[:3]}): their ground truth is unknown; add the "
                f"points, put FSC-147's {GT_COUNTS_FILE} in {self.root}, or list them in `dataset.exclude`")
        if no_ann or no_cls:
            raise ConfigError(
                f"split {self.split!r} of {self.root} lists images without annotation ({len(no_ann)} missing from "
                f"{ANNOTATION_FILE}, e.g. {no_ann[:3]}) or without class ({len(no_cls)} missing from {CLASSES_FILE},"
                f" e.g. {no_cls[:3]}); the metadata files come from different releases: download them together")

    def _check_images(self) -> None:
        image_dir = self.root / IMAGE_DIR
        missing = [i for i in self._ids if not (image_dir / i).is_file()]
        if missing:
            raise DataNotFoundError(
                image_dir, "dataset.root",
                f"{len(missing)} of the {len(self._ids)} images of split {self.split!r} are missing "
                f"(e.g. {', '.join(missing[:5])}); expected files {IMAGE_DIR}/<image id> for the ids in "
                f"{SPLITS_FILE}. {HOW_TO_GET}")

    def class_of(self, image_id: str) -> str:
        return self._class_of[image_id]

    def images_of(self, class_name: str) -> list[str]:
        return list(self._by_class.get(class_name, []))

    def count_of(self, image_id: str) -> int:
        if not _has_points(self._annotations[image_id]) and image_id in self._gt_counts:
            return int(self._gt_counts[image_id])
        return len(self._points(image_id)[self._class_of[image_id]])

    @cached_property
    def counts(self) -> np.ndarray:
        """Ground-truth counts of ``image_ids``."""
        return np.array([self.count_of(i) for i in self._ids], dtype=np.int64)

    def _points(self, image_id: str) -> dict[str, np.ndarray]:
        ann = self._annotations[image_id]
        if "points_per_class" in ann:
            return {c: np.asarray(p, dtype=np.float64).reshape(-1, 2) for c, p in ann["points_per_class"].items()}
        return {self._class_of[image_id]: np.asarray(ann.get("points", []), dtype=np.float64).reshape(-1, 2)}

    def _boxes(self, image_id: str) -> dict[str, np.ndarray]:
        ann = self._annotations[image_id]
        if "boxes_per_class" in ann:
            return {c: np.asarray(b, dtype=np.float64).reshape(-1, 4) for c, b in ann["boxes_per_class"].items()}
        boxes = [_box_from_corners(c) for c in ann.get("box_examples_coordinates", [])]
        return {self._class_of[image_id]: np.asarray(boxes, dtype=np.float64).reshape(-1, 4)}

    def load(self, image_id: str) -> ImageItem:
        image = decode_image(self.root / IMAGE_DIR / image_id)
        points = self._points(image_id)
        check_points(points, image.shape[:2], image_id)
        return ImageItem(image_id=image_id, image=image, points=points,
                         boxes=self._boxes(image_id), class_name=self._class_of[image_id])
