"""DETR (a closed-vocabulary detector) as a detect-then-count counter.

DETR knows only the classes of its checkpoint's label map (``config.id2label``: the 80 COCO categories for
``facebook/detr-resnet-50``). A prompt is turned into label ids by :func:`resolve_labels`: lower case, a leading
article and a final ``.`` dropped; then the label itself, the synonym table (:data:`SYNONYMS`, extended by
``model.synonyms``), and the singular of the last word (``cars`` -> ``car``, ``strawberries`` -> ``strawberry``,
``knives`` -> ``knife``, ``buses`` -> ``bus``). A prompt that resolves to no label raises
:class:`OutOfVocabulary` before the model runs: the pair's unit fails with that line, never a count of 0.

DETR's prediction does not depend on the prompt, so each image goes through the model once
(``DetrImageFeatures``, computed at the first prompt, after the prompts were resolved) and every prompt reads the
same queries. A query is a detection of the prompt when its most probable label (softmax over the labels and
"no object", the best label other than "no object" taken, as transformers' ``post_process_object_detection``) is
one of the prompt's labels and its probability is above ``score_threshold`` (strictly, as there). The boxes are
scaled to the original image (DETR predicts them relative to the unpadded image), and the selection, NMS and
unit masses at box centres are the other detectors' (``detect_count``); DETR's set prediction needs no NMS, so
``nms_iou`` is 1.0 (off) by default and the boxes and scores equal the library's post-processing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from countboard.batching import CPU_ITEM_BYTES
from countboard.counting.models.detect_count import DetectionDecoding, boxes_from_cxcywh, fetch_selected
from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.device_batch import check_setting, device_step, images_per_call
from countboard.models.hf_loading import load_pretrained
from countboard.models.preprocess import by_size
from countboard.models.transfer import to_device

#: Prompts (and FSC-147 class names) that name a COCO label by another word. Plurals that only add ``s``/``es``,
#: or turn ``y``/``f`` into ``ies``/``ves``, need no entry (:func:`singular`). A target that is not a label of the
#: checkpoint is ignored.
SYNONYMS: dict[str, str] = {
    "people": "person", "persons": "person", "humans": "person", "human": "person", "men": "person",
    "women": "person", "children": "person", "pedestrians": "person", "pedestrian": "person",
    "bike": "bicycle", "bikes": "bicycle", "motorbike": "motorcycle", "motorbikes": "motorcycle",
    "aeroplane": "airplane", "aeroplanes": "airplane", "plane": "airplane", "planes": "airplane",
    "ship": "boat", "ships": "boat", "sofa": "couch", "sofas": "couch", "television": "tv", "televisions": "tv",
    "tv monitor": "tv", "tvmonitor": "tv", "mobile phone": "cell phone", "phone": "cell phone",
    "cellphone": "cell phone", "doughnut": "donut", "hotdog": "hot dog", "ski": "skis", "ball": "sports ball",
    "balls": "sports ball", "table": "dining table", "plant": "potted plant", "flower pot": "potted plant",
    "mice": "mouse", "teddy": "teddy bear", "teddies": "teddy bear", "alcohol bottle": "bottle",
    "sauce bottle": "bottle", "cattle": "cow", "hydrant": "fire hydrant", "motorcycles": "motorcycle",
}
#: What a label map may hold for an id the checkpoint does not use (COCO's 11 unused ids in DETR's map).
UNUSED_LABELS = frozenset({"n/a", ""})
_ARTICLE = re.compile(r"^(the|a|an)\s+")


class OutOfVocabulary(ValueError):
    """A prompt that names no class of a closed-vocabulary detector's label map."""


def normalise(prompt: str) -> str:
    """Lower case, inner spaces collapsed, a leading article and a final ``.`` dropped.

    Example:
        >>> normalise("  The Red  Cars. ")
        'red cars'
    """
    text = " ".join(str(prompt).lower().split()).rstrip(".").strip()
    return _ARTICLE.sub("", text)


def singular(phrase: str) -> list[str]:
    """Candidate singulars of the last word of ``phrase`` (most specific rule first).

    Example:
        >>> singular("strawberries"), singular("knives"), singular("buses"), singular("cars"), singular("grass")
        (['strawberry'], ['knife', 'knif'], ['buse', 'bus'], ['car'], [])
    """
    head, _, word = phrase.rpartition(" ")
    prefix = f"{head} " if head else ""
    if word.endswith("ss") or len(word) < 3:
        return []
    if word.endswith("ies"):
        return [prefix + word[:-3] + "y"]
    if word.endswith("ves"):
        return [prefix + word[:-3] + "fe", prefix + word[:-3] + "f"]
    out = []
    if word.endswith("s"):
        out.append(prefix + word[:-1])
    if word.endswith("es"):
        out.append(prefix + word[:-2])
    return out


def resolve_labels(prompt: str, vocabulary: Mapping[str, Sequence[int]], synonyms: Mapping[str, str]
                   ) -> tuple[int, ...]:
    """The label ids a prompt names: the label itself, then a synonym, then a singular (of the prompt, then of its
    synonym). ``vocabulary``: normalised label -> ids. Raises :class:`OutOfVocabulary` when nothing matches.

    Example:
        >>> vocab = {"person": [1], "car": [3], "cell phone": [77]}
        >>> resolve_labels("People", vocab, SYNONYMS), resolve_labels("cars.", vocab, SYNONYMS)
        ((1,), (3,))
        >>> resolve_labels("mobile phones", vocab, SYNONYMS)
        (77,)
    """
    key = normalise(prompt)
    for candidate in (key, *singular(key)):
        if candidate in vocabulary:
            return tuple(vocabulary[candidate])
        target = normalise(synonyms.get(candidate, ""))
        if target in vocabulary:
            return tuple(vocabulary[target])
    raise OutOfVocabulary(f"{prompt!r} is not a class of the detector's label map")


@dataclass
class DetrImageFeatures:
    """One image and, once a prompt of it was decoded, DETR's label probabilities and boxes (on the device).

    Attributes:
        item: The image.
        probs: ``(Q, L + 1)`` softmax over the labels and "no object".
        boxes: ``(Q, 4)`` float64 pixel boxes ``(y0, x0, y1, x1)`` in the original image.
    """

    item: ImageItem
    probs: torch.Tensor | None = field(default=None, repr=False)
    boxes: torch.Tensor | None = field(default=None, repr=False)

    @property
    def size(self) -> tuple[int, int]:
        return self.item.size


class DetrCounter(DetectionDecoding, Counter):
    """Counts the DETR detections of the class a prompt names (through the checkpoint's label map).

    Args:
        model_id: Hub id or local directory with a DETR for object detection and its image processor (loaded with
            ``AutoModelForObjectDetection`` and ``AutoImageProcessor``, PIL backend: no torchvision needed).
        score_threshold: A counted detection's label probability is above it (the model card's example: 0.9).
        nms_iou: IoU above which overlapping detections are merged (``1.0``, the default, disables NMS).
        synonyms: More prompt -> label entries, added to :data:`SYNONYMS` (and overriding it).
        image_batch_size: Images per forward pass (images of one size only: no padding changes the features).
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = DetrCounter("facebook/detr-resnet-50")  # doctest: +SKIP
        >>> counter.count([item, item], ["people", "zebras"])  # doctest: +SKIP
        array([7., 0.])
    """

    caches_image_features = True

    def __init__(self, model_id: str = "facebook/detr-resnet-50", score_threshold: float = 0.9, nms_iou: float = 1.0,
                 synonyms: Mapping[str, str] | None = None, image_batch_size: int | str = "auto",
                 device: str = "cpu"):
        super().__init__(device=device)
        from transformers import AutoImageProcessor, AutoModelForObjectDetection

        if not 0.0 <= float(score_threshold) < 1.0:
            raise ConfigError(f"model.score_threshold={score_threshold}: choose a probability in [0, 1)")
        self.model_id = model_id
        self.score_threshold = float(score_threshold)
        self.nms_iou = float(nms_iou)
        self.image_batch_size = check_setting(image_batch_size)
        self.synonyms = {normalise(k): str(v) for k, v in {**SYNONYMS, **dict(synonyms or {})}.items()}
        self.processor = load_pretrained(_PilProcessor(AutoImageProcessor), model_id, "DETR image processor")
        self.model = load_pretrained(AutoModelForObjectDetection, model_id, "DETR model").to(device).eval()
        self.labels = {int(i): str(name) for i, name in self.model.config.id2label.items()}
        self.vocabulary: dict[str, list[int]] = {}
        for i, name in sorted(self.labels.items()):
            if normalise(name) not in UNUSED_LABELS:
                self.vocabulary.setdefault(normalise(name), []).append(i)
        if not self.vocabulary:
            raise ConfigError(f"the DETR checkpoint {model_id!r} has no labels in config.id2label: it cannot be "
                              "prompted with class names")

    def label_ids(self, prompt: str) -> tuple[int, ...]:
        """The label ids ``prompt`` names; :class:`OutOfVocabulary` (one line: the prompt, the checkpoint, what to
        do) when it names none."""
        try:
            return resolve_labels(prompt, self.vocabulary, self.synonyms)
        except OutOfVocabulary:
            known = sorted(self.vocabulary)
            shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
            raise OutOfVocabulary(
                f"DETR ({self.model_id}) has no class {prompt!r} in its label map ({shown}): add "
                f"`model.synonyms={{'{normalise(prompt)}': <label>}}` or prompt only classes it knows "
                "(task.classes)") from None

    def encode_images(self, items: Sequence[ImageItem]) -> list[DetrImageFeatures]:
        """One holder per image; DETR runs at the first decode, after the prompts were checked."""
        return [DetrImageFeatures(it) for it in items]

    @device_step
    def _ensure(self, features: Sequence[DetrImageFeatures]) -> None:
        """DETR once for every image of ``features`` that has no output yet, ``image_batch_size`` images of one
        size per forward pass."""
        todo = list({id(f): f for f in features if f.probs is None}.values())
        for _, idx in by_size([f.item.image for f in todo]).items():
            per_call = images_per_call(self.image_batch_size, self.device, len(idx), CPU_ITEM_BYTES)
            for start in range(0, len(idx), per_call):
                batch = [todo[i] for i in idx[start:start + per_call]]
                inputs = self.processor(images=[np.asarray(f.item.image) for f in batch], return_tensors="pt")
                out = self.model(**{k: v.to(self.device) for k, v in inputs.items()})
                probs = torch.softmax(out.logits.float(), dim=-1)
                sizes = to_device([f.size for f in batch], probs.device, torch.float64)
                boxes = boxes_from_cxcywh(out.pred_boxes.float(), sizes[:, None, :])
                for f, p, b in zip(batch, probs, boxes, strict=True):
                    f.probs, f.boxes = p, b

    def _scored(self, features: Sequence[DetrImageFeatures], prompts: Sequence[str]):
        """Boxes, the prompt's detection scores (0 where the query's label is another) and image sizes of every
        pair, on the device."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        wanted = [self.label_ids(p) for p in prompts]      # every prompt checked before the model runs
        self._ensure(features)
        probs = torch.stack([f.probs for f in features])   # (N, Q, L + 1)
        scores, labels = probs[..., :-1].max(dim=-1)
        allowed = np.zeros((len(prompts), probs.shape[-1] - 1), dtype=bool)
        for n, ids in enumerate(wanted):
            allowed[n, [i for i in ids if i < allowed.shape[1]]] = True
        match = to_device(allowed, probs.device, torch.bool).gather(1, labels)
        score = torch.where(match, scores, torch.zeros_like(scores))
        boxes = torch.stack([f.boxes for f in features])
        return boxes, score, to_device([f.size for f in features], boxes.device, torch.float64)

    @device_step
    def _kept(self, features, prompts, fetch):
        """``fetch(boxes, scores, order, keep)`` of every pair's selection, read in one transfer."""
        boxes, score, sizes = self._scored(features, prompts)
        return fetch_selected(boxes, score, sizes, self.score_threshold, self.nms_iou, fetch)


class _PilProcessor:
    """``AutoImageProcessor.from_pretrained(..., backend="pil")``: the same preprocessing on every machine, with
    or without torchvision."""

    def __init__(self, auto: Any):
        self.auto = auto

    def from_pretrained(self, model_id: str):
        return self.auto.from_pretrained(model_id, backend="pil")

