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
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from countboard.errors import ConfigError, DataNotFoundError
from countboard.grounding.datasets.safe_pickle import load_pickle
from countboard.items import GroundingSample


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

    def load(self, sample_id: str) -> GroundingSample:
        """The sample with its image decoded (what the job's loader workers read ahead; raises what
        ``GroundingSample.load_image`` raises for an image that cannot be read)."""
        sample = self._by_id[sample_id]
        return replace(sample, image=sample.load_image())


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
              "https://zenodo.org/record/4729015/files/mdetr_annotations.tar.gz) or the raw Flickr30K Entities "
              "release (Annotations/, Sentences/, test.txt from https://github.com/BryanPlummer/flickr30k_entities, "
              "with dataset.layout=raw) and the Flickr30k images (https://shannon.cs.illinois.edu/DenotationGraph/) "
              "into flickr30k-images/.")
FLICKR_LAYOUTS = ("mdetr", "raw")
_PHRASE_OPEN = re.compile(r"^\[/EN#(\d+)((?:/[^/\s]*)*)$")


def _union_box(boxes: Sequence[tuple[float, float, float, float]]) -> tuple[float, float, float, float]:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def _mdetr_samples(root: Path, annotation_file: str, image_dir: str) -> list[GroundingSample]:
    """One sample per entry of ``images[].tokens_positive_eval`` (MDETR's per-phrase list).

    The phrase's box is the annotation whose ``tokens_positive`` holds the phrase's span (one per phrase in the
    merged-GT file; the union of several in the separate-GT file). An annotation lists the spans of every phrase
    that refers to its entity, so joining an annotation's spans would glue coreferent phrases together.
    """
    ann = _require(root / annotation_file, "dataset.root / dataset.annotation_file", FLICKR_HOW)
    doc = json.loads(ann.read_text())
    boxes_of: dict[int, list[tuple[list[tuple[int, int]], tuple[float, float, float, float]]]] = {}
    for a in doc["annotations"]:
        spans = [tuple(int(v) for v in s) for s in a.get("tokens_positive") or []]
        boxes_of.setdefault(a["image_id"], []).append((spans, xywh_to_yxyx(a["bbox"])))
    samples = []
    for im in doc["images"]:
        if "tokens_positive_eval" not in im:
            raise ConfigError(f"{ann}: image {im['id']} has no tokens_positive_eval; dataset.annotation_file must "
                              "be MDETR's final_flickr_*GT_<split>.json (or set dataset.layout=raw)")
        for k, phrase_spans in enumerate(im["tokens_positive_eval"]):
            spans = [tuple(int(v) for v in s) for s in phrase_spans]
            matched = [box for a_spans, box in boxes_of.get(im["id"], []) if any(s in a_spans for s in spans)]
            if not matched:
                raise ConfigError(f"{ann}: image {im['id']}, phrase {k} (spans {spans}) has no annotation with "
                                  "those tokens_positive; the file is not in MDETR's Flickr30K Entities layout")
            caption = im["caption"]
            ident = f"{im.get('original_img_id', im['id'])}_{im.get('sentence_id', 0)}_{k}"
            samples.append(GroundingSample(
                sample_id=ident, phrase=" ".join(caption[s:e] for s, e in spans), box=_union_box(matched),
                image_path=root / image_dir / im["file_name"],
                meta={"caption": caption, "image_file": im["file_name"],
                      "image_size": (int(im["height"]), int(im["width"]))}))
    return samples


def parse_flickr_sentence(line: str) -> tuple[str, list[dict]]:
    """A Flickr30K Entities ``Sentences/*.txt`` line: the plain sentence and its ``[/EN#id/type words]`` phrases.

    Returns:
        ``(sentence, phrases)``; each phrase has ``phrase``, ``entity_id``, ``types`` and its character ``span``
        in the sentence (words joined by single spaces).

    Example:
        >>> s, p = parse_flickr_sentence("[/EN#18/people A man] in [/EN#19/clothing/other red] .")
        >>> s, [(q["phrase"], q["entity_id"], q["span"]) for q in p]
        ('A man in red .', [('A man', '18', (0, 5)), ('red', '19', (9, 12))])
    """
    words: list[str] = []
    phrases: list[dict] = []
    current: dict | None = None
    for token in line.split():
        if current is None and token.startswith("["):
            match = _PHRASE_OPEN.match(token)
            if match is None:
                raise ValueError(f"malformed phrase opening {token!r}; expected [/EN#<id>/<type>")
            current = {"entity_id": match.group(1), "types": [t for t in match.group(2).split("/") if t],
                       "first": len(words), "words": []}
            continue
        closes = current is not None and token.endswith("]")
        word = token[:-1] if closes else token
        words.append(word)
        if current is not None:
            current["words"].append(word)
            if closes:
                phrases.append(current)
                current = None
    if current is not None:
        raise ValueError(f"phrase of entity {current['entity_id']} is not closed with ']'")
    out = []
    for p in phrases:
        text = " ".join(p["words"])
        begin = sum(len(w) + 1 for w in words[:p["first"]])
        out.append({"phrase": text, "entity_id": p["entity_id"], "types": p["types"],
                    "span": (begin, begin + len(text))})
    return " ".join(words), out


def parse_flickr_boxes(xml_path: Path) -> tuple[dict, dict[str, list[tuple[float, float, float, float]]]]:
    """``Annotations/<id>.xml``: image info (``filename``, ``height``, ``width``) and entity id -> boxes.

    Boxes come as ``(y0, x0, y1, x1)`` from the file's ``xmin, ymin, xmax, ymax`` (the numbers MDETR's converter
    keeps); objects without a ``bndbox`` (scene, not visual) carry no box.
    """
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(xml_path).getroot()
        size = root.find("size")
        info = {"filename": root.findtext("filename"), "height": int(size.findtext("height")),
                "width": int(size.findtext("width"))}
    except (ET.ParseError, AttributeError, TypeError, ValueError) as err:
        raise ConfigError(f"{xml_path}: not a Flickr30K Entities annotation ({err})") from None
    boxes: dict[str, list[tuple[float, float, float, float]]] = {}
    for obj in root.findall("object"):
        bnd = obj.find("bndbox")
        if bnd is None or len(bnd) == 0:
            continue
        x0, y0, x1, y1 = (float(bnd.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax"))
        for name in obj.findall("name"):
            boxes.setdefault(name.text.strip(), []).append((y0, x0, y1, x1))
    return info, boxes


def _raw_samples(root: Path, split: str, image_dir: str) -> list[GroundingSample]:
    """One sample per phrase whose entity has boxes; its box is the union of them (the merged-GT protocol)."""
    ids_file = _require(root / f"{split}.txt", "dataset.root / dataset.split", FLICKR_HOW)
    samples = []
    for img_id in (t.strip() for t in ids_file.read_text().split()):
        xml_path = _require(root / "Annotations" / f"{img_id}.xml", "dataset.root (Annotations/)", FLICKR_HOW)
        txt_path = _require(root / "Sentences" / f"{img_id}.txt", "dataset.root (Sentences/)", FLICKR_HOW)
        info, boxes = parse_flickr_boxes(xml_path)
        file_name = info["filename"] or f"{img_id}.jpg"
        lines = [ln for ln in txt_path.read_text().splitlines() if ln.strip()]
        for sent_id, line in enumerate(lines):
            try:
                caption, phrases = parse_flickr_sentence(line)
            except ValueError as err:
                raise ConfigError(f"{txt_path}:{sent_id + 1}: {err}") from None
            grounded = [p for p in phrases if p["entity_id"] in boxes]
            for k, p in enumerate(grounded):
                samples.append(GroundingSample(
                    sample_id=f"{img_id}_{sent_id}_{k}", phrase=p["phrase"], box=_union_box(boxes[p["entity_id"]]),
                    image_path=root / image_dir / file_name,
                    meta={"caption": caption, "image_file": file_name, "entity_id": p["entity_id"],
                          "phrase_type": "/".join(p["types"]), "image_size": (info["height"], info["width"])}))
    return samples


class Flickr30kEntities(GroundingDataset):
    """Flickr30K Entities: one sample per grounded phrase of each caption (the paper's 14,481 test samples).

    Two layouts give the same samples with the same ids (``<image>_<sentence>_<phrase>``):

    - ``mdetr``: MDETR's merged-GT json (one image entry per caption; the per-phrase list is
      ``tokens_positive_eval``, the boxes are the annotations whose ``tokens_positive`` hold each phrase's span);
    - ``raw``: the original release, ``Sentences/<id>.txt`` (``[/EN#id/type words]`` markup),
      ``Annotations/<id>.xml`` (boxes per entity id) and ``<split>.txt``; the boxes of an entity are merged into
      their union as in the merged-GT protocol.

    Args:
        root: Folder with the annotations and ``image_dir``.
        annotation_file: The MDETR merged-GT json (``mdetr`` layout).
        image_dir: Folder of the Flickr30k jpgs, relative to ``root``.
        max_samples: Keep only the first N samples.
        layout: ``mdetr`` or ``raw``.
        split: Image-id list ``<split>.txt`` of the ``raw`` layout (``test``, ``val``, ``train``).
    """

    name = "flickr30k_entities"

    def __init__(self, root: str | Path, annotation_file: str = "final_flickr_mergedGT_test.json",
                 image_dir: str = "flickr30k-images", max_samples: int | None = None, layout: str = "mdetr",
                 split: str = "test"):
        if layout not in FLICKR_LAYOUTS:
            raise ConfigError(f"dataset.layout={layout!r}: use one of {', '.join(FLICKR_LAYOUTS)}")
        root = Path(root)
        if layout == "mdetr":
            samples = _mdetr_samples(root, annotation_file, image_dir)
        else:
            samples = _raw_samples(root, split, image_dir)
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
        allow_unsafe_pickle: Load ``refs_file`` with the full ``pickle`` module. By default it is read with a
            restricted unpickler that accepts plain containers, strings, numbers and numpy values only (the
            published file needs nothing else), so a crafted file cannot run code.
    """

    name = "refcoco_plus"

    def __init__(self, root: str | Path, split: str = "testA", refs_file: str = "refs(unc).p",
                 instances_file: str = "instances.json", image_dir: str = "train2014",
                 max_samples: int | None = None, allow_unsafe_pickle: bool = False):
        if split not in ("train", "val", "testA", "testB"):
            raise ConfigError(f"dataset.split={split!r}: RefCOCO+ (UNC) splits are train, val, testA, testB")
        root = Path(root)
        refs_path = _require(root / refs_file, "dataset.root / dataset.refs_file", REFCOCO_HOW)
        inst_path = _require(root / instances_file, "dataset.root / dataset.instances_file", REFCOCO_HOW)
        # the published file is a Python 2 pickle: latin1 decodes its str objects
        refs = load_pickle(refs_path, "dataset.refs_file", trusted=bool(allow_unsafe_pickle), encoding="latin1")
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
