"""PairTally (681 images, each holding two object categories, with point annotations of both) in its released layout.

Layout under ``root`` (``dataset/pairtally_dataset/`` of github:bbvisual/PairTally_Benchmark, with the images of its
Google Drive archive)::

    annotations/pairtally_annotations[_inter|_intra]_<prompts>.json   {image: {"points", "negative_points",
                                                                       "positive_prompt", "negative_prompt", ...}}
    annotations/pairtally_splits[_inter|_intra]_<prompts>.json        {"test": [image, ...]}
    images/<image>

``prompts`` is ``simple`` (short names: "pasta") or ``augmented`` (descriptions), ``subset`` ``all``, ``inter`` or
``intra``. An image's two classes are its positive and negative prompts, its counts their points; its own class is
the positive one (so the classic and negative-label tasks read it as FSC-147). The PrACo++ multi-class test
(``task=praco_multiclass``) prompts every image with every class of the split; an image whose two prompts are the
same text (possible for the simple prompts of an INTRA pair) cannot be told apart by a prompt and is left out, with
a warning naming how many (``left_out``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from countboard.counting.datasets.fsc147 import ListedSplitDataset
from countboard.decode import check_points, decode_image
from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageItem

log = logging.getLogger(__name__)

PROMPTS = ("simple", "augmented")
SUBSETS = ("all", "inter", "intra")
KEYS = ("points", "negative_points", "positive_prompt", "negative_prompt")
HOW_TO_GET = ("PairTally's annotations are in github:bbvisual/PairTally_Benchmark (dataset/pairtally_dataset/"
              "annotations/), its images in the PairTally-Images-Only.zip its README links; put both under "
              "`dataset.root` as annotations/ and images/.")


def annotation_files(root: Path, prompts: str, subset: str) -> tuple[Path, Path]:
    """The annotation and split files of a prompt style and subset."""
    part = "" if subset == "all" else f"_{subset}"
    folder = root / "annotations"
    return (folder / f"pairtally_annotations{part}_{prompts}.json",
            folder / f"pairtally_splits{part}_{prompts}.json")


class PairTallyDataset(ListedSplitDataset):
    """One split of PairTally.

    Args:
        root: Folder holding the layout above.
        prompts: ``simple`` or ``augmented`` class prompts.
        subset: ``all``, ``inter`` (two categories) or ``intra`` (one category, two attributes).
        split: Key of the split file (``test``).
        image_dir: Folder of the images, relative to ``root``.
        max_images: Keep the first ``n`` images.
        check_files: Check at construction that every selected image file exists.
    """

    name = "pairtally"

    def __init__(self, root: str | Path, prompts: str = "simple", subset: str = "all", split: str = "test",
                 image_dir: str = "images", max_images: int | None = None, check_files: bool = True):
        if prompts not in PROMPTS or subset not in SUBSETS:
            raise ConfigError(f"dataset.prompts={prompts!r}, dataset.subset={subset!r}: use prompts in {PROMPTS} and "
                              f"subset in {SUBSETS}")
        self.root, self.split, self.image_dir = Path(root), split, Path(root) / image_dir
        ann_file, split_file = annotation_files(self.root, prompts, subset)
        missing = [p.name for p in (ann_file, split_file) if not p.is_file()]
        if missing:
            raise DataNotFoundError(self.root / "annotations", "dataset.root",
                                    f"Missing {', '.join(missing)}. {HOW_TO_GET}")
        annotations = json.loads(ann_file.read_text())
        splits = json.loads(split_file.read_text())
        if split not in splits:
            raise ConfigError(f"split {split!r} is not in {split_file}; use one of {sorted(splits)}")
        ids = list(splits[split])
        for image_id in ids:
            absent = [k for k in KEYS if k not in annotations.get(image_id, {})]
            if absent:
                raise ConfigError(f"{ann_file}: image {image_id!r} of split {split!r} lacks {absent}; download the "
                                  f"annotation and split files of one release together")
        same = [i for i in ids if _same_prompt(annotations[i])]
        self.left_out = len(same)
        if same:
            log.warning("pairtally: %d of %d images have one prompt for both classes (e.g. %s) and are left out",
                        len(same), len(ids), same[0])
        ids = [i for i in ids if i not in set(same)]
        if max_images is not None:
            ids = ids[:max_images]
        self._ids = ids
        self._ann = {i: annotations[i] for i in ids}
        self._classes = list(dict.fromkeys(c for i in ids for c in self._pair(i)))
        if check_files:
            gone = [i for i in ids if not (self.image_dir / i).is_file()]
            if gone:
                raise DataNotFoundError(self.image_dir, "dataset.root", f"{len(gone)} of the {len(ids)} images are "
                                                                        f"missing (e.g. {', '.join(gone[:3])}). "
                                                                        f"{HOW_TO_GET}")

    def _pair(self, image_id: str) -> tuple[str, str]:
        ann = self._ann[image_id]
        return str(ann["positive_prompt"]).strip(), str(ann["negative_prompt"]).strip()

    def counts_of(self, image_id: str) -> dict[str, int]:
        """Ground-truth count of every class of the split in the image (its two classes' points, 0 elsewhere)."""
        pos, neg = self._pair(image_id)
        ann = self._ann[image_id]
        out = dict.fromkeys(self._classes, 0)
        out[pos], out[neg] = len(ann["points"]), len(ann["negative_points"])
        return out

    def class_of(self, image_id: str) -> str:
        return self._pair(image_id)[0]

    def count_of(self, image_id: str) -> int:
        return len(self._ann[image_id]["points"])

    def load(self, image_id: str) -> ImageItem:
        image = decode_image(self.image_dir / image_id)
        pos, neg = self._pair(image_id)
        ann = self._ann[image_id]
        points = {pos: np.asarray(ann["points"], np.float64).reshape(-1, 2),
                  neg: np.asarray(ann["negative_points"], np.float64).reshape(-1, 2)}
        check_points(points, image.shape[:2], image_id)
        return ImageItem(image_id=image_id, image=image, points=points, class_name=pos)


def _same_prompt(ann: dict) -> bool:
    return str(ann["positive_prompt"]).strip().lower() == str(ann["negative_prompt"]).strip().lower()
