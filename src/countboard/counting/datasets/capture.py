"""CAPTURe (Pothiraj et al. 2025: counting objects in a pattern that continues behind an occluder) as its authors
release it (github:atinpothiraj/CAPTURe and the Hugging Face dataset atinp/CAPTURe).

Layout under ``root``::

    real_metadata.json         [{"image_file", "ground_truth", "object", "bbox": {x, y, width, height}, ...}]
    synthetic_metadata.json    [{"image_file", "ground_truth", "dot_shape", "positions": [[x, y], ...], ...}]
    real_dataset/<image_file>          real_dataset.zip unpacked (its dataset/ folder renamed, as the README does)
    occluded_dataset/<image_file>      the synthetic images (generate_occluded_images.py's folder)

``split``: ``real`` (FSC-147 images with a black box over part of the pattern) or ``synthetic`` (dots in a pattern,
one or more hidden). ``occluded=false`` reads the same entries' unoccluded images, as the authors'
``unoccluded_scripts`` do: ``unocc_real_dataset/`` (FSC-147's images of those names) and ``unoccluded_dataset/``.
A unit is an entry (``capture_<split>_<image stem>``); its count is ``ground_truth``, its class the counted object
(``object``; ``<dot_shape>s`` for the synthetic images); the synthetic ``positions`` (hidden ones included) are its
points. The question is the authors' (``occluded_scripts/*.py``), built from the same class.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from countboard.counting.datasets.fsc147 import ListedSplitDataset
from countboard.counting.datasets.questions import Question, QuestionSet, decode_image, integer_answer
from countboard.errors import ConfigError, DataNotFoundError

SPLITS = ("real", "synthetic")
METADATA = {"real": "real_metadata.json", "synthetic": "synthetic_metadata.json"}
#: Image folders of each split, occluded and not, in the order looked for.
IMAGE_DIRS = {("real", True): ("real_dataset", "dataset"),
              ("synthetic", True): ("occluded_dataset", "synthetic_dataset", "generate_synthetic/occluded_dataset"),
              ("real", False): ("unocc_real_dataset",),
              ("synthetic", False): ("unoccluded_dataset", "generate_synthetic/unoccluded_dataset")}
QUESTION = ("Count the exact number of {obj} in the image. Assume the pattern of {obj} continues behind any black "
            "box. Provide the total number of {obj} as if the black box were not there. Only count {obj} that are "
            "visible within the frame (or would be visible without the occluding box). If {obj} are partially in "
            "the frame (i.e. if any part of {obj} are visible), count it. If the {obj} would be partially in the "
            "frame without the occluding box, count it.")
HOW_TO_GET = ("CAPTURe is at github:atinpothiraj/CAPTURe (real_metadata.json, synthetic_metadata.json) and on the "
              "Hugging Face hub as atinp/CAPTURe (real_dataset.zip, synthetic_dataset.zip); put the metadata in "
              "<dataset.root>, unzip real_dataset.zip there and rename its dataset/ folder to real_dataset/, and put "
              "the synthetic images in occluded_dataset/.")


class CaptureDataset(QuestionSet, ListedSplitDataset):
    """One split of CAPTURe.

    Args:
        root: Folder holding the layout above.
        split: ``real`` or ``synthetic``.
        occluded: The occluded images (the benchmark) or the unoccluded ones (its control).
        image_dir: Folder of the images (relative to ``root``); default: the first of the split's folders above.
        max_images: Keep the first ``n`` entries.
        check_files: Check at construction that every selected image file exists.
    """

    name = "capture"

    def __init__(self, root: str | Path, split: str = "real", occluded: bool = True, image_dir: str | None = None,
                 max_images: int | None = None, check_files: bool = True):
        if split not in SPLITS:
            raise ConfigError(f"dataset.split={split!r}: use one of {SPLITS}")
        self.root, self.split, self.occluded = Path(root), split, bool(occluded)
        meta = self.root / METADATA[split]
        if not meta.is_file():
            raise DataNotFoundError(self.root, "dataset.root", f"Missing {METADATA[split]}. {HOW_TO_GET}")
        entries = json.loads(meta.read_text())
        folders = (image_dir,) if image_dir else IMAGE_DIRS[(split, self.occluded)]
        present = [self.root / f for f in folders if (self.root / f).is_dir()]
        self.image_dir = present[0] if present else self.root / folders[0]
        self._files: dict[str, Path] = {}
        self._questions: dict[str, Question] = {}
        for n, entry in enumerate(entries):
            where = f"{meta} entry {n}"
            absent = [k for k in ("image_file", "ground_truth") if k not in entry]
            if absent:
                raise ConfigError(f"{where} lacks {absent}; expected the authors' {METADATA[split]}")
            obj = (str(entry["object"]) if split == "real" else f"{entry['dot_shape']}s").strip()
            unit = f"capture_{split}_{Path(str(entry['image_file'])).stem}"
            count = integer_answer(entry["ground_truth"], where)
            positions = entry.get("positions") if split == "synthetic" else None
            fields = {"capture_split": split, "occluded": self.occluded}
            if split == "synthetic":
                fields.update(pattern=str(entry.get("shape", "")), num_occluded=int(entry.get("num_occluded", 0)))
            self._files[unit] = self.image_dir / str(entry["image_file"])
            self._questions[unit] = Question(question=QUESTION.format(obj=obj), answer=str(count), count=count,
                                             noun=obj, fields=fields,
                                             points=None if positions is None
                                             else np.asarray(positions, np.float64).reshape(-1, 2))
        ids = list(self._questions)
        self._ids = ids[:max_images] if max_images is not None else ids
        self._classes = list(dict.fromkeys(self._questions[i].noun for i in self._ids))
        if check_files:
            gone = [self._files[i].name for i in self._ids if not self._files[i].is_file()]
            if gone:
                raise DataNotFoundError(self.image_dir, "dataset.root",
                                        f"{len(gone)} of the {len(self._ids)} images of split {split!r} are missing "
                                        f"(e.g. {', '.join(gone[:3])}). {HOW_TO_GET}")

    def _pixels(self, image_id: str) -> np.ndarray:
        return decode_image(self._files[image_id].read_bytes(), str(self._files[image_id]))
