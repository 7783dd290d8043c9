"""Florence-2's open-vocabulary detection task as a detect-then-count counter.

Florence-2 answers ``<OPEN_VOCABULARY_DETECTION>`` (the processor's "Locate <prompt> in the image.") by writing each
box it finds as four quantised ``<loc_*>`` tokens, or a polygon, after the phrase. The image tower (DaViT and the
projector) does not see the text, so ``encode_images`` runs it once per image; ``decode`` puts those image tokens in
place of the ``<image>`` placeholders of every prompt of the image (as the model's forward does), runs the text
encoder and generates for a batch of prompts at once, and parses the answers with the processor's
``post_process_generation``.

Florence-2 gives no score: every box (or polygon) it writes is one counted object, unit mass at its centre (a
polygon's bounding box centre). ``nms_iou`` below 1 merges overlapping boxes (off by default: the model writes each
object once). Generation is deterministic (no sampling); ``num_beams`` follows the model card's example (3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from countboard.batching import CPU_ITEM_BYTES
from countboard.counting.models.detect_count import DetectionDecoding, fetch_selected
from countboard.counting.models.prompt_batching import group_by_image
from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.device_batch import check_setting, device_step, images_per_call
from countboard.models.hf_loading import load_processor_and_model
from countboard.models.preprocess import vit_pixel_values
from countboard.models.transfer import to_device

TASK = "<OPEN_VOCABULARY_DETECTION>"


@dataclass
class FlorenceImageFeatures:
    """The projected image tokens ``(1, T, D)`` of one image (on the model's device) and its ``(H, W)``."""

    tokens: torch.Tensor
    size: tuple[int, int]


def answer_boxes(answer: dict) -> np.ndarray:
    """``(K, 4)`` pixel boxes ``(y0, x0, y1, x1)`` of one parsed ``<OPEN_VOCABULARY_DETECTION>`` answer: its boxes,
    then the bounding box of each polygon instance (all of its polygons' points).

    Example:
        >>> answer_boxes({"bboxes": [[1, 2, 5, 8]], "polygons": [[[0, 0, 4, 0, 4, 2]]]}).tolist()
        [[2.0, 1.0, 8.0, 5.0], [0.0, 0.0, 2.0, 4.0]]
    """
    rows = [[b[1], b[0], b[3], b[2]] for b in answer.get("bboxes", [])]
    for polygons in answer.get("polygons", []):
        points = np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in polygons if len(p) >= 2])
        if len(points):
            (x0, y0), (x1, y1) = points.min(axis=0), points.max(axis=0)
            rows.append([y0, x0, y1, x1])
    return np.asarray(rows, dtype=np.float64).reshape(-1, 4)


class Florence2Counter(DetectionDecoding, Counter):
    """Counts the objects Florence-2 locates for a text prompt (its open-vocabulary detection task).

    Args:
        model_id: Hub id or local directory with a ``Florence2ForConditionalGeneration`` and its processor.
        max_new_tokens: Longest answer (each box takes four tokens; the model card's example allows 1024).
        num_beams: Beam search width (``1``: greedy).
        nms_iou: IoU above which overlapping boxes are merged (``1.0``, the default, keeps every box).
        prompt_batch_size: Prompts per text encoder and generation batch.
        image_batch_size: Images per image-tower batch in ``encode_images``.
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = Florence2Counter("florence-community/Florence-2-base")  # doctest: +SKIP
        >>> counter.count([item], ["apples"])  # doctest: +SKIP
        array([7.])
    """

    caches_image_features = True

    def __init__(self, model_id: str = "florence-community/Florence-2-base", max_new_tokens: int = 1024,
                 num_beams: int = 3, nms_iou: float = 1.0, prompt_batch_size: int = 4,
                 image_batch_size: int | str = "auto",
                 device: str = "cpu"):
        super().__init__(device=device)
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.model_id = model_id
        self.max_new_tokens = int(max_new_tokens)
        self.num_beams = int(num_beams)
        self.nms_iou = float(nms_iou)
        self.prompt_batch_size = int(prompt_batch_size)
        self.image_batch_size = check_setting(image_batch_size)
        self.processor, self.model = load_processor_and_model(AutoProcessor, AutoModelForImageTextToText, model_id,
                                                              "Florence-2", device)
        if self.model.config.model_type != "florence2":
            raise ConfigError(f"model.model_id {model_id!r} is a {self.model.config.model_type!r} checkpoint, not "
                              f"'florence2'; choose the model option made for it (docs/counters.md)")

    def texts(self, prompts: Sequence[str]) -> list[str]:
        """The encoder's input text of each prompt, as the processor lays it out (image placeholders, ``<s>``, the
        task's sentence, ``</s>``)."""
        proc, tok = self.processor, self.processor.tokenizer
        sentence = proc.task_prompts_with_input[TASK]
        return [proc.image_token * proc.num_image_tokens + tok.bos_token + sentence.format(input=p) + tok.eos_token
                for p in prompts]

    @device_step
    def encode_images(self, items: Sequence[ImageItem]) -> list[FlorenceImageFeatures]:
        """Pixels (``vit_pixel_values``: on the device, or the processor for its bicubic resize), then the image
        tower and projector once per image."""
        feats: list[FlorenceImageFeatures] = []
        per_call = images_per_call(self.image_batch_size, self.device, len(items), CPU_ITEM_BYTES)
        for start in range(0, len(items), per_call):
            batch = items[start:start + per_call]
            pixels = vit_pixel_values([it.image for it in batch], self.processor.image_processor, self.device)
            tokens = self.model.get_image_features(pixels.to(self.model.dtype)).pooler_output
            feats.extend(FlorenceImageFeatures(tokens[k:k + 1], it.size) for k, it in enumerate(batch))
        return feats

    @device_step
    def generate(self, feat: FlorenceImageFeatures, prompts: Sequence[str]) -> torch.Tensor:
        """Generated token ids ``(Q, L)`` of one image's prompts: image tokens put in place of the placeholders
        (the model's own ``masked_scatter``), the text encoder once for the batch, then ``generate`` on its output."""
        tok = self.processor.tokenizer(self.texts(prompts), padding=True, add_special_tokens=False,
                                       return_tensors="pt").to(self.device)
        ids, mask = tok["input_ids"], tok["attention_mask"]
        embeds = self.model.get_input_embeddings()(ids)
        image = feat.tokens.to(embeds.dtype).expand(len(prompts), -1, -1)
        embeds = embeds.masked_scatter((ids == self.model.config.image_token_id)[..., None], image)
        encoded = self.model.model.language_model.encoder(inputs_embeds=embeds, attention_mask=mask)
        return self.model.generate(input_ids=ids, attention_mask=mask, encoder_outputs=encoded,
                                   max_new_tokens=self.max_new_tokens, num_beams=self.num_beams, do_sample=False)

    def parse(self, sequences: torch.Tensor, sizes: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        """Pixel boxes ``(y0, x0, y1, x1)`` of each generated answer (the processor's decoding and parser)."""
        texts = self.processor.batch_decode(sequences, skip_special_tokens=False)
        return [answer_boxes(self.processor.post_process_generation(text=t, task=TASK, image_size=(w, h))[TASK])
                for t, (h, w) in zip(texts, sizes, strict=True)]

    def _kept(self, features: Sequence[FlorenceImageFeatures], prompts: Sequence[str], fetch):
        """Generation and parsing per chunk of an image's prompts; then every pair's boxes (score 1, padding 0)
        through the shared selection on the device, ``fetch(boxes, scores, order, keep)`` read in one transfer."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        found: list[np.ndarray | None] = [None] * len(prompts)
        for feat, idx in group_by_image(features):
            for k in range(0, len(idx), self.prompt_batch_size):
                chunk = idx[k:k + self.prompt_batch_size]
                sequences = self.generate(feat, [prompts[i] for i in chunk])
                for i, boxes in zip(chunk, self.parse(sequences, [feat.size] * len(chunk)), strict=True):
                    found[i] = boxes
        width = max(1, max(len(b) for b in found))
        boxes = np.zeros((len(found), width, 4))
        scores = np.zeros((len(found), width))
        for n, b in enumerate(found):
            boxes[n, :len(b)], scores[n, :len(b)] = b, 1.0
        dev = features[0].tokens.device
        sizes = to_device([f.size for f in features], dev, torch.float64)
        return fetch_selected(to_device(boxes, dev, torch.float64), to_device(scores, dev, torch.float64), sizes,
                              0.5, self.nms_iou, fetch)
