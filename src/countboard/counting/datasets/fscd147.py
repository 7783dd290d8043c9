"""FSCD-147 (Nguyen et al., ECCV 2022, "Few-shot Object Counting and Detection"): FSC-147's val and test images
with a box on every object, in the COCO files the detecting counters read (Counting-DETR, DAVE, GeCo, CountGD).

Layout under ``root``: FSC-147's (``fsc147.FSC147Dataset``) plus the COCO files, as DAVE's ``utils/data.py`` reads
them (``COCO(data_path/'instances_' + split + '.json')``, images matched by ``file_name``)::

    instances_val.json, instances_test.json   {"images": [{"id", "file_name", "width", "height"}],
                                               "annotations": [{"image_id", "bbox": [x, y, w, h], ...}], ...}

Boxes are in the pixels of ``images_384_VarV2`` (the images DAVE opens to scale them). An item's ``object_boxes``
are its boxes as ``(y0, x0, y1, x1)``, the ground truth of detection AP; its count, points and exemplar boxes stay
FSC-147's (the counting ground truth: the COCO files box the objects again, and their number can differ).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from countboard.counting.datasets.fsc147 import FSC147Dataset
from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageItem

SPLITS = ("val", "test")
HOW_TO_GET = ("FSCD-147's COCO files instances_val.json and instances_test.json are released with Counting-DETR "
              "(github:VinAIResearch/Counting-DETR, its FSCD-147 annotations link); put them in the FSC-147 folder "
              "`dataset.root` (images_384_VarV2/, annotation_FSC147_384.json, ...).")


def coco_boxes(path: Path) -> dict[str, np.ndarray]:
    """``{file_name: (K, 4) (y0, x0, y1, x1)}`` of a COCO instances file (every image, boxed or not)."""
    data = json.loads(path.read_text())
    absent = [k for k in ("images", "annotations") if k not in data]
    if absent:
        raise ConfigError(f"{path}: no {absent} (found {sorted(data)}); expected a COCO instances file")
    names = {int(img["id"]): str(img["file_name"]) for img in data["images"]}
    boxes: dict[str, list] = {name: [] for name in names.values()}
    for ann in data["annotations"]:
        if int(ann["image_id"]) not in names:
            raise ConfigError(f"{path}: annotation {ann.get('id')} names image_id {ann['image_id']}, which is not in "
                              f"its images")
        x, y, w, h = (float(v) for v in ann["bbox"])
        boxes[names[int(ann["image_id"])]].append([y, x, y + h, x + w])
    return {name: np.asarray(b, np.float64).reshape(-1, 4) for name, b in boxes.items()}


class FSCD147Dataset(FSC147Dataset):
    """The val or test split of FSC-147 with FSCD-147's box on every object.

    Args:
        root: FSC-147's folder with ``instances_<split>.json`` beside its files.
        split: ``val`` or ``test``.
        exclude: As ``FSC147Dataset``'s (default: none, FSCD-147 keeps every image).
        images_per_class, max_images, check_files: As ``FSC147Dataset``'s.
    """

    name = "fscd147"

    def __init__(self, root: str | Path, split: str = "test", exclude: str | Path | Sequence[str] | None = None,
                 images_per_class: int | None = None, max_images: int | None = None, check_files: bool = True):
        if split not in SPLITS:
            raise ConfigError(f"dataset.split={split!r}: FSCD-147 boxes the objects of {SPLITS} only")
        coco = Path(root) / f"instances_{split}.json"
        if not coco.is_file():
            raise DataNotFoundError(Path(root), "dataset.root", f"Missing instances_{split}.json. {HOW_TO_GET}")
        super().__init__(root, split=split, exclude=exclude, images_per_class=images_per_class,
                         max_images=max_images, check_files=check_files)
        self._object_boxes = coco_boxes(coco)
        unboxed = [i for i in self._ids if i not in self._object_boxes]
        if unboxed:
            raise ConfigError(f"{coco}: {len(unboxed)} of the {len(self._ids)} images of split {split!r} are not in its "
                              f"images (e.g. {', '.join(unboxed[:3])}); download it with the same FSC-147 release")

    def object_boxes_of(self, image_id: str) -> np.ndarray:
        """Every annotated object's box, ``(K, 4)`` of ``(y0, x0, y1, x1)`` pixels."""
        return self._object_boxes[image_id].copy()

    def load(self, image_id: str) -> ImageItem:
        item = super().load(image_id)
        item.object_boxes = {item.class_name: self.object_boxes_of(image_id)}
        return item
