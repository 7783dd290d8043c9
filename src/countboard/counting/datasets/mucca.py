"""MUCCA (the multi-category class-agnostic counting images of PrACo's 2026 follow-up, "Does it Really Count?",
arXiv 2605.02752), as its Zenodo record 19231375 ships it and the authors' ``multiclass_main.py`` reads it.

Layout under ``root`` (the unpacked package, ``data/multiclass-dataset/`` of github:ciampluca/PrACo)::

    images/<image id>                        mcac_*.jpg
    annotations.json                         {image_id: {"H", "W", "points": [[x, y], ...], "classes": [id, ...]}}
    class_mapping.json                       {"<id>": "<class name>"}
    multiclass_class_counts_per_image.json   {image_id: {class name: count}}  (the statistics' ground truth)
    multiclass_image_classes.txt             "<image id>\\t<class>,<class>" (the classes multiclass_main.py reads)
    multiclass_split_images.json, multiclass_split_classes.json   {"test": [...]}
    densitymap_sigmas_per_class.json         {class name: sigma or [sigma_y, sigma_x]}  (optional; default 1.0)

The points are annotated at 384 px on the image's shorter side (``generate_density_maps.py``: "Points are at 384px
scale"); an item's points are mapped back to the image's pixels. The package has no density maps: the ground-truth
map of an (image, class) is ``density_maps/<stem>_<class>.npy`` where it was generated, else made from the points
exactly as the authors' ``create_density_map`` makes it (a unit at each rounded point of a 384 px-short-side grid whose
long side is a multiple of 16, Gaussian-filtered with the class's sigma; mcac_22.jpg's white bands cropped first).
The metadata of the earlier PrACo++ release (``praco_multiclass``) is the same; this adds the authors' image-class
list, the points in pixels and the maps.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from countboard.counting.datasets.praco_multiclass import METADATA, PracoMulticlassDataset
from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageItem

IMAGE_CLASSES = "multiclass_image_classes.txt"
SIGMAS = "densitymap_sigmas_per_class.json"
#: Images whose white top and bottom bands the authors crop before sizing the map (``LETTERBOXED_IMAGES``).
LETTERBOXED = ("mcac_22.jpg",)
ANNOTATION_SIDE = 384
HOW_TO_GET = ("MUCCA is Zenodo record 19231375 (https://zenodo.org/records/19231375); unpack it into `dataset.root` "
              "(the PrACo repository's data/multiclass-dataset/ layout: images/ and the metadata files).")


def read_image_classes(path: Path) -> dict[str, list[str]]:
    """``multiclass_image_classes.txt`` as ``{image id: [class, ...]}``, parsed as ``multiclass_main.py`` does."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        parts = line.strip().split("\t")
        if len(parts) == 2:
            out[parts[0]] = [c.strip() for c in parts[1].split(",")]
    return out


def letterbox_rows(image: np.ndarray, threshold: float = 240) -> tuple[int, int]:
    """The authors' ``detect_and_crop_letterbox``: first and past-last rows darker on average than ``threshold``."""
    bright = image.mean(axis=(1, 2))
    dark = np.flatnonzero(bright < threshold)
    return (int(dark[0]), int(dark[-1]) + 1) if len(dark) else (0, image.shape[0])


def density_map(points: np.ndarray, height: int, width: int, sigma) -> np.ndarray:
    """The authors' ``create_density_map``: points annotated at 384 px on the short side of a ``height x width``
    image, put on a 384 px-short-side grid (long side rounded to a multiple of 16) and Gaussian-filtered.

    Example:
        >>> density_map(np.array([[10.0, 20.0]]), 384, 384, 1.0).sum().round(3), density_map(np.zeros((0, 2)), 300,
        ...     600, 1.0).shape
        (np.float32(1.0), (384, 768))
    """
    from scipy import ndimage

    aspect = width / height
    if height <= width:
        target_h, target_w = ANNOTATION_SIDE, int(16 * round((ANNOTATION_SIDE * aspect) / 16))
        annot_h, annot_w = float(ANNOTATION_SIDE), width * (ANNOTATION_SIDE / height)
    else:
        target_w, target_h = ANNOTATION_SIDE, int(16 * round((ANNOTATION_SIDE / aspect) / 16))
        annot_w, annot_h = float(ANNOTATION_SIDE), height * (ANNOTATION_SIDE / width)
    out = np.zeros((target_h, target_w), dtype="float32")
    for x, y in np.asarray(points, np.float64).reshape(-1, 2):
        col = min(target_w - 1, max(0, int(round(x * target_w / annot_w))))
        row = min(target_h - 1, max(0, int(round(y * target_h / annot_h))))
        out[row, col] += 1.0
    return ndimage.gaussian_filter(out, sigma=sigma, order=0)


class MuccaDataset(PracoMulticlassDataset):
    """MUCCA's test split: images with several annotated classes, every class's count and map.

    Args:
        root: Folder holding the layout above.
        split: Key of the split files (``test``).
        image_dir: Folder of the images, relative to ``root``.
        max_images: Keep the first ``n`` images.
        check_files: Check at construction that every selected image file exists.
    """

    name = "mucca"

    def __init__(self, root: str | Path, split: str = "test", image_dir: str = "images",
                 max_images: int | None = None, check_files: bool = True):
        root = Path(root)
        missing = [f for f in (*METADATA, IMAGE_CLASSES) if not (root / f).is_file()]
        if missing:
            raise DataNotFoundError(root, "dataset.root", f"Missing {', '.join(missing)}. {HOW_TO_GET}")
        super().__init__(root, split=split, image_dir=image_dir, max_images=max_images, check_files=check_files)
        self._image_classes = read_image_classes(root / IMAGE_CLASSES)
        for image_id in self._ids:
            listed = set(self._image_classes.get(image_id, []))
            present = {c for c, n in self._counts[image_id].items() if n > 0}
            if listed != present:
                raise ConfigError(f"{root / IMAGE_CLASSES}: {image_id!r} lists {sorted(listed)}, but its counts "
                                  f"give {sorted(present)}; download the files of one release together")
        sigma_file = root / SIGMAS
        raw = json.loads(sigma_file.read_text()) if sigma_file.is_file() else {}
        self._sigmas = {c: tuple(s) if isinstance(s, list) else float(s) for c, s in raw.items()}
        self._sizes: dict[str, tuple[int, int, int]] = {}

    def image_classes(self, image_id: str) -> list[str]:
        """The image's classes as ``multiclass_image_classes.txt`` lists them (the positive prompts)."""
        return list(self._image_classes[image_id])

    def sigma_of(self, class_name: str):
        """The class's Gaussian sigma (``densitymap_sigmas_per_class.json``; 1.0, the script's default, else)."""
        return self._sigmas.get(class_name, 1.0)

    def _size(self, image_id: str) -> tuple[int, int, int]:
        """``(top row, height, width)`` of the image's content, as the authors size its maps."""
        if image_id not in self._sizes:
            self._sizes[image_id] = self._content_size(image_id)
        return self._sizes[image_id]

    def _content_size(self, image_id: str) -> tuple[int, int, int]:
        path = self.image_dir / image_id
        if not path.is_file():
            ann = self._annotations[image_id]
            return 0, int(ann["H"]), int(ann["W"])
        with Image.open(path) as img:
            if image_id not in LETTERBOXED:
                return 0, img.height, img.width
            top, bottom = letterbox_rows(np.asarray(img.convert("RGB")))
            return top, bottom - top, img.width

    def gt_density_map(self, image_id: str, class_name: str) -> np.ndarray | None:
        """``density_maps/<stem>_<class>.npy`` where generated, else the authors' map of the class's points."""
        stored = super().gt_density_map(image_id, class_name)
        if stored is not None:
            return stored
        points = super()._points(image_id).get(class_name)
        if points is None:
            return None
        _, height, width = self._size(image_id)
        return density_map(points, height, width, self.sigma_of(class_name))

    def _points(self, image_id: str) -> dict[str, np.ndarray]:
        """The points in the image's pixels (annotated at 384 px on the content's short side)."""
        top, height, width = self._size(image_id)
        scale = min(height, width) / ANNOTATION_SIDE
        return {c: p * scale + np.array([0.0, top]) for c, p in super()._points(image_id).items()}

    def load(self, image_id: str) -> ImageItem:
        with Image.open(self.image_dir / image_id) as img:
            image = np.asarray(img.convert("RGB"), dtype=np.uint8)
        return ImageItem(image_id=image_id, image=image, points=self._points(image_id),
                         class_name=self.class_of(image_id))
