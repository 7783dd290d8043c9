"""Grounding DINO and MM Grounding DINO (and LLMDet, its checkpoints) as a detect-then-count counter.

The model and processor load through transformers' Auto classes for zero-shot object detection
(``AutoModelForZeroShotObjectDetection``, ``AutoProcessor``), which resolve a checkpoint's ``model_type``
(``grounding-dino`` or ``mm-grounding-dino``) to its classes; both share the structure used here (a backbone module
under ``model.model.backbone``, the fusion encoder, the decoder) and the Grounding DINO processor.

Grounding DINO fuses text and image features in its encoder, so only the image backbone (Swin + position
embeddings) is prompt-independent. ``encode_images`` resizes and normalises the images on the model's device
(``countboard.models.preprocess.grounding_dino_pixel_values``, equal to the processor's bit for bit; images of
the same size as one batch) and runs that backbone once per image; ``decode`` runs the
fusion encoder and the decoder over the pairs of many images per call (pairs of one pixel size and one prompt
token length; ``_calls``), each pair's cached backbone output gathered by row (``device_batch.object_rows``; the
model's own backbone module is wrapped so its forward returns the cache). Each pair's row is computed as it would
be alone, so which pairs share a call does not change a count (``tests/counting/models/test_grounding_dino.py``).

Each prompt is queried alone (``"<prompt>."``), never together with other class names: Grounding DINO assigns
each box to the best-matching phrase, so prompting several classes at once would tell it which classes compete
and would change the negative-label test. A box is counted when its best token probability exceeds
``box_threshold`` and ``text_threshold`` (HF's post-processing keeps boxes above ``box_threshold`` and uses
``text_threshold`` only to name them: a box no token of which passes ``text_threshold`` has no label there, and is
not counted here); kept boxes whose centre lies in the image then go through NMS and become unit masses at their
centres. The selection runs for all pairs of a call at once on the device (``select_detections_batched``), read
in one transfer. With ``text_threshold <= box_threshold`` and NMS off, the boxes and scores equal transformers'
``post_process_grounded_object_detection``. At most ``num_queries`` (900) objects can be counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from countboard.counting.models.detect_count import DetectionDecoding, boxes_from_cxcywh, fetch_selected
from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.device_batch import device_step, element_calls, object_rows
from countboard.models.hf_loading import load_processor_and_model
from countboard.models.preprocess import by_size, grounding_dino_pixel_values
from countboard.models.transfer import to_device


@dataclass
class DinoImageFeatures:
    """Processed pixels and the backbone output (feature maps, masks, position embeddings) of one image."""

    pixel_values: torch.Tensor
    maps: list[tuple[torch.Tensor, torch.Tensor]]
    positions: list[torch.Tensor]
    size: tuple[int, int]


class CachedBackbone(nn.Module):
    """Wraps ``GroundingDinoModel.backbone``: returns ``cached`` (the feature maps with their masks, and the position
    embeddings, one row per pair of the call) when it is set."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.inner = backbone
        self.cached: tuple[list[tuple[torch.Tensor, torch.Tensor]], list[torch.Tensor]] | None = None

    @property
    def position_embedding(self) -> nn.Module:
        return self.inner.position_embedding

    def forward(self, pixel_values: torch.Tensor, pixel_mask: torch.Tensor):
        if self.cached is None:
            return self.inner(pixel_values, pixel_mask)
        maps, positions = self.cached
        return maps, positions


#: Elements of the fusion encoder's largest activations (pairs x image tokens x per-token width) in one call; a
#: call holds at least ``prompt_batch_size`` pairs whatever their size (one image's prompts: a call known to fit).
FUSION_ELEMENTS = 2**28

#: ``model_type`` values of the checkpoints this counter runs (the Auto classes would load other detectors too).
DINO_MODEL_TYPES = ("grounding-dino", "mm-grounding-dino")


class GroundingDinoCounter(DetectionDecoding, Counter):
    """Counts the Grounding DINO (or MM Grounding DINO / LLMDet) detections of a text prompt.

    Args:
        model_id: Hub id or local directory with a Grounding DINO or MM Grounding DINO checkpoint and its processor.
        box_threshold: A counted detection's box score (best token probability) is above it.
        text_threshold: A counted detection has a token probability above it (the box carries the prompt's label).
        nms_iou: IoU above which overlapping detections are merged (``1.0`` disables NMS).
        prompt_template: Format string applied to each (lower-cased) prompt; Grounding DINO expects a final ``.``.
        prompt_batch_size: Distinct prompts per fusion-encoder/decoder call (a call covers their pairs over every
            image of one pixel size, within ``FUSION_ELEMENTS``).
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = GroundingDinoCounter("IDEA-Research/grounding-dino-tiny")  # doctest: +SKIP
        >>> counter.count([item], ["apples"])  # doctest: +SKIP
        array([11.])
    """

    caches_image_features = True

    def __init__(self, model_id: str = "IDEA-Research/grounding-dino-tiny", box_threshold: float = 0.35,
                 text_threshold: float = 0.25, nms_iou: float = 0.5, prompt_template: str = "{}.",
                 prompt_batch_size: int = 8, device: str = "cpu"):
        super().__init__(device=device)
        from transformers import AutoModelForZeroShotObjectDetection, AutoProcessor

        self.model_id = model_id
        self.box_threshold = float(box_threshold)
        self.text_threshold = float(text_threshold)
        self.nms_iou = float(nms_iou)
        self.prompt_template = prompt_template
        self.prompt_batch_size = int(prompt_batch_size)
        self.processor, self.model = load_processor_and_model(
            AutoProcessor, AutoModelForZeroShotObjectDetection, model_id, "Grounding DINO", device)
        model_type = getattr(self.model.config, "model_type", "")
        if model_type not in DINO_MODEL_TYPES:
            raise ConfigError(f"model.model_id {model_id!r} is a {model_type!r} checkpoint, not one of "
                              f"{list(DINO_MODEL_TYPES)}; choose the model option made for it (docs/counters.md)")
        cfg = self.model.config
        # per image token: the encoder's residual, value, offsets and FFN (its image-to-text attention adds the
        # heads times the prompt's tokens)
        self._token_width = 4 * cfg.d_model + cfg.encoder_ffn_dim
        self._heads = cfg.encoder_attention_heads
        self._lengths: dict[str, int] = {}
        self._backbone = CachedBackbone(self.model.model.backbone)
        self.model.model.backbone = self._backbone

    @device_step
    def encode_images(self, items: Sequence[ImageItem]) -> list[DinoImageFeatures]:
        """Pixels on the device, images of the same size resized as one batch (``grounding_dino_pixel_values``,
        equal to the processor's); the backbone once per image.

        The backbone stays one image at a time: batched, its features differ from single-image ones by float
        rounding (about 1e-6 at some sizes), which could move a score across a threshold.
        """
        images = [it.image for it in items]
        feats: list[DinoImageFeatures | None] = [None] * len(items)
        for _, idx in by_size(images).items():
            pixels, masks = grounding_dino_pixel_values([images[i] for i in idx], self.processor.image_processor,
                                                        self.device)
            for k, i in enumerate(idx):
                pv, mask = pixels[k:k + 1], masks[k:k + 1]
                maps, positions = self._backbone.inner(pv, mask)
                feats[i] = DinoImageFeatures(pv, list(maps), list(positions), items[i].size)
        return feats

    @device_step
    def scores_and_boxes(self, feat: DinoImageFeatures, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Box scores ``(Q, N)`` and normalised ``(cx, cy, w, h)`` boxes ``(Q, N, 4)`` for one image's prompts (on
        the device). The prompts must tokenize to the same length (see ``_calls``)."""
        return self.pair_scores_and_boxes([feat] * len(prompts), prompts)

    @device_step
    def pair_scores_and_boxes(self, features: Sequence[DinoImageFeatures], prompts: Sequence[str]
                              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Box scores ``(P, N)`` and normalised boxes ``(P, N, 4)`` of ``P`` pairs of any images of one pixel
        size, in one fusion-encoder/decoder call: each pair's cached backbone output gathered by row
        (``device_batch.object_rows``). The prompts must tokenize to the same length (see ``_calls``)."""
        rows = object_rows(features, feature_tensors)
        texts = [self.prompt_template.format(p.lower().strip()) for p in prompts]
        tok = self.processor.tokenizer(texts, return_tensors="pt").to(self.device)
        levels = len(features[0].maps)
        self._backbone.cached = ([(rows.tensor(f"map{k}"), rows.tensor(f"mask{k}")) for k in range(levels)],
                                 [rows.tensor(f"pos{k}") for k in range(len(features[0].positions))])
        try:
            # the model reads only the shape of the pixels (the backbone's output is the cache)
            pixels = features[0].pixel_values.expand(len(prompts), -1, -1, -1)
            out = self.model(pixel_values=pixels, input_ids=tok["input_ids"], attention_mask=tok["attention_mask"],
                             token_type_ids=tok.get("token_type_ids"))
        finally:
            self._backbone.cached = None
        scores = torch.sigmoid(out.logits.float()).max(dim=-1).values
        return scores, out.pred_boxes.float()

    def _token_length(self, prompt: str) -> int:
        n = self._lengths.get(prompt)
        if n is None:
            n = self._lengths[prompt] = len(self.processor.tokenizer(
                self.prompt_template.format(prompt.lower().strip()))["input_ids"])
        return n

    def _calls(self, features: Sequence[DinoImageFeatures], prompts: Sequence[str]) -> list[list[int]]:
        """Pair indices of each fusion-encoder/decoder call: pairs of the same pixel size and the same prompt token
        length, over any images, at most ``prompt_batch_size`` distinct prompts per call, in calls of at most
        ``FUSION_ELEMENTS`` activations (or ``prompt_batch_size`` pairs, where those are more).

        Padding would change the model's phrase masks (a phrase closed by [SEP] counts only when [SEP] is the last
        token), so prompts are batched only with prompts of the same length.
        """
        groups: dict[tuple, list[int]] = {}
        seen: dict[tuple, dict[str, int]] = {}
        for i, (f, p) in enumerate(zip(features, prompts, strict=True)):
            shape = (tuple(f.pixel_values.shape[-2:]), self._token_length(p))
            names = seen.setdefault(shape, {})
            chunk = names.setdefault(p, len(names)) // self.prompt_batch_size
            groups.setdefault((*shape, chunk), []).append(i)
        out = []
        for key, idx in groups.items():
            tokens = sum(int(m.shape[-2]) * int(m.shape[-1]) for m, _ in features[idx[0]].maps)
            pair = tokens * (self._token_width + self._heads * key[1])
            budget = max(FUSION_ELEMENTS, pair * self.prompt_batch_size)
            out.extend(idx[part] for part in element_calls(len(idx), pair, budget))
        return out

    @device_step
    def _kept(self, features: Sequence[DinoImageFeatures], prompts: Sequence[str], fetch) -> list[np.ndarray]:
        """Fusion encoder + decoder over the pairs of several images per call (``_calls``), over the cached
        backbone output; then the selection of every pair at once on the device and ``fetch(boxes, scores, order,
        keep)`` read in one transfer."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        threshold = max(self.box_threshold, self.text_threshold)
        calls = self._calls(features, prompts)
        parts = [self.pair_scores_and_boxes([features[i] for i in idx], [prompts[i] for i in idx]) for idx in calls]
        order = [i for idx in calls for i in idx]
        score, boxes = torch.cat([sc for sc, _ in parts]), torch.cat([bx for _, bx in parts])
        if order != list(range(len(order))):
            back = to_device(np.argsort(order, kind="stable"), score.device, torch.long)
            score, boxes = score.index_select(0, back), boxes.index_select(0, back)
        sizes = to_device([f.size for f in features], boxes.device, torch.float64)
        pix = boxes_from_cxcywh(boxes, sizes[:, None, :])
        return fetch_selected(pix, score, sizes, threshold, self.nms_iou, fetch)


def feature_tensors(feat: DinoImageFeatures) -> dict[str, torch.Tensor]:
    """One image's backbone output by name (``map<k>``, ``mask<k>``, ``pos<k>``), for ``object_rows``."""
    out = {}
    for k, (m, mask) in enumerate(feat.maps):
        out[f"map{k}"], out[f"mask{k}"] = m, mask
    for k, p in enumerate(feat.positions):
        out[f"pos{k}"] = p
    return out
