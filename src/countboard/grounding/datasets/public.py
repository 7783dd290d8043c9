"""Phrase-grounding datasets in their published formats: one sample = (image, phrase, ground-truth box).

- Flickr30K Entities, merged test split as released by MDETR (``final_flickr_mergedGT_test.json``, COCO-style: one
  image entry per caption, one annotation per phrase with its merged box and character spans in the caption);
- RefCOCO+ testA / testB in the ``refer`` release (``refs(unc).p`` + ``instances.json``, images from COCO
  train2014): one sample per referring expression;
- SpatialSense (``annotations.json`` + ``images/{flickr,nyu}``): the positive test relations, grounding the whole
  triplet or the subject (both with the subject box) or the object (object box).

Boxes are ``(y0, x0, y1, x1)`` in pixels of the original image. Images load lazily.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from countboard.errors import ConfigError, DataNotFoundError


@dataclass
class GroundingSample:
    """One phrase to ground in one image.

    Attributes:
        sample_id: Stable id within the dataset.
        phrase: Text to ground.
        box: Ground-truth ``(y0, x0, y1, x1)`` in pixels.
        image_path: File to read the image from (``None`` when ``image`` is given).
        image: ``(H, W, 3)`` uint8 RGB array, for generated samples.
        meta: Extra fields (caption, category, setting) kept in the per-sample records.
    """

    sample_id: str
    phrase: str
    box: tuple[float, float, float, float]
    image_path: Path | None = None
    image: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def load_image(self) -> np.ndarray:
        """The image as ``(H, W, 3)`` uint8 RGB."""
        if self.image is not None:
            return self.image
        if self.image_path is None or not Path(self.image_path).is_file():
            raise FileNotFoundError(f"image of sample {self.sample_id} not found at {self.image_path}")
        with Image.open(self.image_path) as im:
            return np.asarray(im.convert("RGB"))


class GroundingDataset:
    """A list of ``GroundingSample`` addressed by id (what the ``grounding`` task iterates)."""

    name = "grounding"

    def __init__(self, samples: Sequence[GroundingSample], max_samples: int | None = None):
        self.samples = list(samples)[:max_samples] if max_samples else list(samples)
        self._by_id = {s.sample_id: s for s in self.samples}
        if len(self._by_id) != len(self.samples):
            raise ValueError(f"{self.name}: sample ids are not unique")

    def __len__(self) -> int:
        return len(self.samples)

    def ids(self) -> list[str]:
        return [s.sample_id for s in self.samples]

    def __getitem__(self, sample_id: str) -> GroundingSample:
        return self._by_id[sample_id]


def _require(path: Path, key: str, how: str) -> Path:
    if not path.exists():
        raise DataNotFoundError(path, key, how)
    return path


def xywh_to_yxyx(bbox: Sequence[float]) -> tuple[float, float, float, float]:
    """COCO ``[x, y, w, h]`` to ``(y0, x0, y1, x1)``.

    Example:
        >>> xywh_to_yxyx([10, 20, 5, 8])
        (20.0, 10.0, 28.0, 15.0)
    """
    x, y, w, h = (float(v) for v in bbox)
    return y, x, y + h, x + w


FLICKR_HOW = ("Get the MDETR annotations (final_flickr_mergedGT_test.json, "
              "https://zenodo.org/record/4729015/files/mdetr_annotations.tar.gz) and the Flickr30k images "
              "(https://shannon.cs.illinois.edu/DenotationGraph/) into flickr30k-images/.")


class Flickr30kEntities(GroundingDataset):
    """Flickr30K Entities merged test split (MDETR format): one sample per annotated phrase.

    Args:
        root: Folder with ``annotation_file`` and ``image_dir``.
        annotation_file: The MDETR merged-GT json.
        image_dir: Folder of the Flickr30k jpgs, relative to ``root``.
        max_samples: Keep only the first N samples.
    """

    name = "flickr30k_entities"

    def __init__(self, root: str | Path, annotation_file: str = "final_flickr_mergedGT_test.json",
                 image_dir: str = "flickr30k-images", max_samples: int | None = None):
        root = Path(root)
        ann = _require(root / annotation_file, "dataset.root / dataset.annotation_file", FLICKR_HOW)
        doc = json.loads(ann.read_text())
        images = {im["id"]: im for im in doc["images"]}
        samples = []
        for a in doc["annotations"]:
            im = images[a["image_id"]]
            spans = a.get("tokens_positive") or []
            phrase = " ".join(im["caption"][s:e] for s, e in spans).strip()
            if not phrase:
                continue
            samples.append(GroundingSample(
                sample_id=f"{a['image_id']}_{a['id']}", phrase=phrase, box=xywh_to_yxyx(a["bbox"]),
                image_path=root / image_dir / im["file_name"],
                meta={"caption": im["caption"], "image_file": im["file_name"],
                      "image_size": (int(im["height"]), int(im["width"]))}))
        super().__init__(samples, max_samples)


REFCOCO_HOW = ("Get refcoco+.zip from the refer release (https://github.com/lichengunc/refer: refs(unc).p and "
               "instances.json) and the COCO train2014 images (https://cocodataset.org) into train2014/.")


class RefCocoPlus(GroundingDataset):
    """RefCOCO+ (UNC split, ``refer`` format): one sample per referring expression of ``split``.

    Args:
        root: Folder with ``refs(unc).p`` and ``instances.json``.
        split: ``testA`` (people) or ``testB`` (other objects); ``val``/``train`` also work.
        image_dir: COCO train2014 images, relative to ``root``.
        max_samples: Keep only the first N samples.
    """

    name = "refcoco_plus"

    def __init__(self, root: str | Path, split: str = "testA", refs_file: str = "refs(unc).p",
                 instances_file: str = "instances.json", image_dir: str = "train2014",
                 max_samples: int | None = None):
        if split not in ("train", "val", "testA", "testB"):
            raise ConfigError(f"dataset.split={split!r}: RefCOCO+ (UNC) splits are train, val, testA, testB")
        root = Path(root)
        refs_path = _require(root / refs_file, "dataset.root / dataset.refs_file", REFCOCO_HOW)
        inst_path = _require(root / instances_file, "dataset.root / dataset.instances_file", REFCOCO_HOW)
        with refs_path.open("rb") as f:
            refs = pickle.load(f, encoding="latin1")  # the published file is a Python 2 pickle
        inst = json.loads(inst_path.read_text())
        anns = {a["id"]: a for a in inst["annotations"]}
        images = {im["id"]: im for im in inst["images"]}
        cats = {c["id"]: c["name"] for c in inst.get("categories", [])}
        samples = []
        for ref in refs:
            if ref["split"] != split:
                continue
            ann = anns[ref["ann_id"]]
            im = images[ref["image_id"]]
            for sent in ref["sentences"]:
                samples.append(GroundingSample(
                    sample_id=f"{ref['ref_id']}_{sent['sent_id']}", phrase=sent["sent"],
                    box=xywh_to_yxyx(ann["bbox"]), image_path=root / image_dir / im["file_name"],
                    meta={"category": cats.get(ref.get("category_id"), ""), "image_file": im["file_name"],
                          "image_size": (int(im["height"]), int(im["width"]))}))
        super().__init__(samples, max_samples)


SPATIALSENSE_HOW = ("Get annotations.json and images.tar.gz from SpatialSense "
                    "(https://github.com/princeton-vl/SpatialSense, Google Drive link in its README) and unpack "
                    "the images into images/.")
SPATIALSENSE_SETTINGS = ("triplet", "subject", "object")


def _spatialsense_box(bbox: Sequence[float]) -> tuple[float, float, float, float]:
    y0, y1, x0, x1 = (float(v) for v in bbox)  # published order: [y0, y1, x0, x1]
    return y0, x0, y1, x1


class SpatialSense(GroundingDataset):
    """SpatialSense positive relations of ``split`` in one of three settings.

    ``triplet`` grounds "subject predicate object" with the subject box (the subject is the target, the object
    the reference); ``subject`` and ``object`` ground the names alone with their own boxes.

    Args:
        root: Folder with ``annotations.json`` and ``images/flickr``, ``images/nyu``.
        setting: ``triplet``, ``subject`` or ``object``.
        split: ``test`` (the paper's 1,811 positive relations), ``valid`` or ``train``.
        max_samples: Keep only the first N samples.
    """

    name = "spatialsense"

    def __init__(self, root: str | Path, setting: str = "triplet", split: str = "test",
                 annotation_file: str = "annotations.json", image_dir: str = "images",
                 max_samples: int | None = None):
        if setting not in SPATIALSENSE_SETTINGS:
            raise ConfigError(f"dataset.setting={setting!r}: use one of {', '.join(SPATIALSENSE_SETTINGS)}")
        root = Path(root)
        ann = _require(root / annotation_file, "dataset.root / dataset.annotation_file", SPATIALSENSE_HOW)
        samples = []
        for im in json.loads(ann.read_text()):
            if im["split"] != split:
                continue
            url = im["url"]
            subset = "flickr" if "flickr" in url else "nyu"
            path = root / image_dir / subset / url.rsplit("/", 1)[-1]
            for rel in im["annotations"]:
                if not rel["label"]:
                    continue
                subj, obj = rel["subject"], rel["object"]
                if setting == "object":
                    phrase, box = obj["name"], _spatialsense_box(obj["bbox"])
                else:
                    box = _spatialsense_box(subj["bbox"])
                    phrase = subj["name"] if setting == "subject" else f"{subj['name']} {rel['predicate']} {obj['name']}"
                samples.append(GroundingSample(
                    sample_id=str(rel["_id"]), phrase=phrase, box=box, image_path=path,
                    meta={"predicate": rel["predicate"], "setting": setting, "image_file": f"{subset}/{path.name}",
                          "image_size": (int(im["height"]), int(im["width"]))}))
        super().__init__(samples, max_samples)
