"""PrACo++ multi-class benchmark (200 MCAC test images, 45 classes) in its released layout, and a synthetic twin.

Layout under ``root``::

    images/<image id>                        images (not bundled; MCAC is published by its authors)
    annotations.json                         {image_id: {"H", "W", "points": [[x, y], ...], "classes": [id, ...]}}
    class_mapping.json                       {"<id>": "<class name>"}
    multiclass_class_counts_per_image.json   {image_id: {class name: count}} (every class of the split)
    multiclass_split_images.json             {"test": [image ids]}
    multiclass_split_classes.json            {"test": [class names]}

``multiclass_image_classes.txt``, ``multiclass_gt_counts.json`` and ``densitymap_sigmas_per_class.json`` may be
present and are not needed; ``density_maps/<img id>_<class>.npy`` (the authors' ground-truth maps), when present,
are the ground truth of the localized metrics (else the annotated points are). ``SyntheticMulticlass`` writes coloured shapes in the same layout.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

from countboard.counting.datasets.fsc147 import ListedSplitDataset
from countboard.decode import check_points, decode_image
from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageItem

ANNOTATIONS = "annotations.json"
CLASS_MAPPING = "class_mapping.json"
CLASS_COUNTS = "multiclass_class_counts_per_image.json"
SPLIT_IMAGES = "multiclass_split_images.json"
SPLIT_CLASSES = "multiclass_split_classes.json"
METADATA = (ANNOTATIONS, CLASS_MAPPING, CLASS_COUNTS, SPLIT_IMAGES, SPLIT_CLASSES)
HOW_TO_GET = ("The PrACo++ metadata ships with the PrACo repository (multi-class folder); the images are MCAC's "
              "test images (mcac_*.jpg). Put the metadata files in `dataset.root` and the images in "
              "`dataset.root`/images/.")


class PracoMulticlassDataset(ListedSplitDataset):
    """One split of the PrACo++ multi-class benchmark: images with several annotated classes.

    ``class_of`` is an image's most numerous class (the ``ImageDataset`` contract); ``counts_of`` gives every class.

    Args:
        root: Folder holding the layout above.
        split: Key of the split files (``test``).
        image_dir: Folder of the images, relative to ``root``.
        max_images: Keep the first ``n`` images.
        check_files: Check at construction that every selected image file exists.
    """

    name = "praco_multiclass"

    def __init__(self, root: str | Path, split: str = "test", image_dir: str = "images",
                 max_images: int | None = None, check_files: bool = True):
        self.root = Path(root)
        self.split = split
        self.image_dir = self.root / image_dir
        missing = [f for f in METADATA if not (self.root / f).is_file()]
        if missing:
            raise DataNotFoundError(self.root, "dataset.root", f"Missing {', '.join(missing)}. {HOW_TO_GET}")
        images = json.loads((self.root / SPLIT_IMAGES).read_text())
        classes = json.loads((self.root / SPLIT_CLASSES).read_text())
        if split not in images or split not in classes:
            raise ConfigError(f"split {split!r} is not in {self.root / SPLIT_IMAGES}; use one of {sorted(images)}")
        self._annotations = json.loads((self.root / ANNOTATIONS).read_text())
        self._names = {int(k): v for k, v in json.loads((self.root / CLASS_MAPPING).read_text()).items()}
        counts = json.loads((self.root / CLASS_COUNTS).read_text())
        self._classes = list(classes[split])
        ids = list(images[split])[:max_images] if max_images is not None else list(images[split])
        self._check(ids, counts)
        self._ids = ids
        self._counts = {i: {c: int(counts[i].get(c, 0)) for c in self._classes} for i in ids}
        if check_files:
            absent = [i for i in ids if not (self.image_dir / i).is_file()]
            if absent:
                raise DataNotFoundError(self.image_dir, "dataset.root",
                                        f"{len(absent)} of the {len(ids)} images are missing (e.g. "
                                        f"{', '.join(absent[:5])}). {HOW_TO_GET}")

    def _check(self, ids: list[str], counts: dict) -> None:
        """Every image annotated, and the per-class counts equal to the points (a mixed release is refused)."""
        for image_id in ids:
            if image_id not in self._annotations or image_id not in counts:
                raise ConfigError(f"image {image_id!r} of split {self.split!r} is missing from "
                                  f"{ANNOTATIONS} or {CLASS_COUNTS} in {self.root}; download the files together")
            ann = self._annotations[image_id]
            if len(ann.get("points", [])) != len(ann.get("classes", [])):
                raise ConfigError(f"{self.root / ANNOTATIONS}: image {image_id!r} has {len(ann.get('points', []))} "
                                  f"points but {len(ann.get('classes', []))} class ids")
            unknown = {k for k in ann["classes"] if k not in self._names}
            if unknown:
                raise ConfigError(f"{self.root / ANNOTATIONS}: image {image_id!r} uses class ids {sorted(unknown)} "
                                  f"that {CLASS_MAPPING} does not name")
            from_points = Counter(self._names[k] for k in ann["classes"])
            listed = {c: n for c, n in counts[image_id].items() if n}
            if dict(from_points) != listed:
                raise ConfigError(f"{self.root / CLASS_COUNTS}: counts of {image_id!r} ({listed}) differ from its "
                                  f"points in {ANNOTATIONS} ({dict(from_points)})")

    def counts_of(self, image_id: str) -> dict[str, int]:
        """Ground-truth count of every class of the split in the image (0 where absent)."""
        return dict(self._counts[image_id])

    def gt_density_map(self, image_id: str, class_name: str) -> np.ndarray | None:
        """The release's ground-truth map ``root/density_maps/<img id>_<class>.npy``, or ``None`` when absent."""
        path = self.root / "density_maps" / f"{Path(image_id).stem}_{class_name}.npy"
        return np.load(path, allow_pickle=False) if path.is_file() else None

    def class_of(self, image_id: str) -> str:
        counts = self._counts[image_id]
        return max(self._classes, key=lambda c: counts[c])

    def count_of(self, image_id: str) -> int:
        return self._counts[image_id][self.class_of(image_id)]

    def _points(self, image_id: str) -> dict[str, np.ndarray]:
        ann = self._annotations[image_id]
        pts = np.asarray(ann["points"], np.float64).reshape(-1, 2)
        names = np.array([self._names[k] for k in ann["classes"]], dtype=object)
        return {c: pts[names == c] for c in dict.fromkeys(names.tolist())}

    def load(self, image_id: str) -> ImageItem:
        image = decode_image(self.image_dir / image_id)
        points = self._points(image_id)
        check_points(points, image.shape[:2], image_id)
        return ImageItem(image_id=image_id, image=image, points=points,
                         class_name=self.class_of(image_id))


def write_synthetic_multiclass(root: str | Path, n_images: int = 12, n_classes: int = 5,
                               image_size: tuple[int, int] = (96, 96), count_range: tuple[int, int] = (1, 8),
                               seed: int = 0) -> Path:
    """Coloured shapes in the PrACo++ layout: each image holds 2 or 3 of the first ``n_classes`` shape classes.

    Deterministic from ``seed``; the root is written once (an existing layout is kept as it is).
    """
    from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES, SceneStyle, render_scene

    root = Path(root)
    if all((root / f).is_file() for f in METADATA):
        return root
    (root / "images").mkdir(parents=True, exist_ok=True)
    classes = list(SHAPE_CLASSES)[:n_classes]
    rng = np.random.default_rng(seed)
    annotations, counts, ids = {}, {}, []
    for k in range(n_images):
        present = rng.choice(n_classes, size=int(rng.integers(2, min(3, n_classes) + 1)), replace=False)
        wanted = {classes[c]: int(rng.integers(count_range[0], count_range[1] + 1)) for c in sorted(present)}
        scene = render_scene(wanted, tuple(image_size), rng, SceneStyle(size_range=(6.0, 10.0)))
        image_id = f"syn_{k:03d}.png"
        Image.fromarray(scene.image).save(root / "images" / image_id)
        points, class_ids = [], []
        for name, pts in scene.points.items():
            points += np.asarray(pts).round(2).tolist()
            class_ids += [classes.index(name)] * len(pts)
        annotations[image_id] = {"H": image_size[0], "W": image_size[1], "points": points, "classes": class_ids}
        counts[image_id] = {c: len(scene.points.get(c, [])) for c in classes}
        ids.append(image_id)
    files = {ANNOTATIONS: annotations, CLASS_MAPPING: {str(i): c for i, c in enumerate(classes)},
             CLASS_COUNTS: counts, SPLIT_IMAGES: {"test": ids}, SPLIT_CLASSES: {"test": classes}}
    for name, obj in files.items():
        (root / name).write_text(json.dumps(obj))
    return root


class SyntheticMulticlass(PracoMulticlassDataset):
    """``write_synthetic_multiclass`` on first use, then read as ``PracoMulticlassDataset``."""

    name = "synthetic_multiclass"

    def __init__(self, root: str | Path, n_images: int = 12, n_classes: int = 5,
                 image_size: tuple[int, int] = (96, 96), count_range: tuple[int, int] = (1, 8), seed: int = 0,
                 max_images: int | None = None):
        write_synthetic_multiclass(root, n_images, n_classes, tuple(image_size), tuple(count_range), seed)
        super().__init__(root, split="test", max_images=max_images)
