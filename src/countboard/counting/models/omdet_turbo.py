"""OmDet-Turbo (real-time open-vocabulary detector) as a detect-then-count counter.

OmDet-Turbo's image path (Swin backbone and hybrid encoder) does not see the text, so ``encode_images`` runs it
over the images in calls sized by the device and keeps the encoder's multi-scale states stacked
(``models.device_batch``); ``decode`` runs only the fusion decoder, over the pairs of many images per call (pairs
whose task has one token length), each pair's states gathered by row. The text side is cached as the model's own
language cache does (class embedding and task features per prompt, computed once per distinct prompt), here keyed by
the prompt string so that no lookup waits for the device.

Each prompt is queried alone: class ``[prompt]`` and task ``"Detect <prompt>."`` (the processor's default task for
one class), never together with other class names, which would tell the model which classes compete. A query's
score is the sigmoid of its class logit, as in the processor's ``post_process_grounded_object_detection``; queries
scoring above ``score_threshold`` whose box centre lies in the image and that survive NMS are counted, unit mass at
each box centre (``detect_count``, one transfer per batch).

Without torchvision: the model and the DETR image processor's PIL backend load without it; the
``OmDetTurboProcessor`` class (which needs it for its NMS) is not used. Pixels are made on the device by
``preprocess.grounding_dino_pixel_values`` (the DETR processor's resize to a fixed size, rescale, normalise, equal
to the PIL backend's bit for bit; torchvision's resize, where the processor uses it, differs by rounding).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from countboard.batching import CPU_ITEM_BYTES
from countboard.counting.models.detect_count import DetectionDecoding, boxes_from_cxcywh, fetch_selected
from countboard.counting.models.prompt_batching import EmbeddingCache
from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.device_batch import (
    ImageRef,
    check_setting,
    device_step,
    distinct,
    element_calls,
    encode_in_calls,
    images_per_call,
    pair_rows,
    runs,
)
from countboard.models.hf_loading import load_pretrained
from countboard.models.preprocess import grounding_dino_pixel_values
from countboard.models.transfer import to_device

#: Elements of the decoder's largest activations (pairs x queries x per-query width) in one call.
DECODER_ELEMENTS = 2**27


class OmDetTurboCounter(DetectionDecoding, Counter):
    """Counts the OmDet-Turbo detections of a text prompt.

    Args:
        model_id: Hub id or local directory with an ``OmDetTurboForObjectDetection``, its tokenizer and its image
            processor.
        score_threshold: A counted detection's sigmoid class score is above it (strictly, as transformers).
        nms_iou: IoU above which overlapping detections are merged (``1.0`` disables NMS).
        task_template: The task sentence of a prompt (the processor's default for one class).
        prompt_batch_size: Distinct prompts per text-encoder call (the decoder runs over the pairs of many images
            per call, within ``DECODER_ELEMENTS``).
        image_batch_size: Images per backbone and encoder batch in ``encode_images``.
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = OmDetTurboCounter("omlab/omdet-turbo-swin-tiny-hf")  # doctest: +SKIP
        >>> counter.count([item, item], ["apples", "zebras"])  # doctest: +SKIP
        array([9., 0.])
    """

    caches_image_features = True

    def __init__(self, model_id: str = "omlab/omdet-turbo-swin-tiny-hf", score_threshold: float = 0.3,
                 nms_iou: float = 0.3, task_template: str = "Detect {}.", prompt_batch_size: int = 8,
                 image_batch_size: int | str = "auto", device: str = "cpu"):
        super().__init__(device=device)
        from transformers import AutoImageProcessor, AutoModelForZeroShotObjectDetection, AutoTokenizer

        self.model_id = model_id
        self.score_threshold = float(score_threshold)
        self.nms_iou = float(nms_iou)
        self.task_template = task_template
        self.prompt_batch_size = int(prompt_batch_size)
        self.image_batch_size = check_setting(image_batch_size)
        self.image_processor = load_pretrained(AutoImageProcessor, model_id, "OmDet-Turbo image processor")
        self.tokenizer = load_pretrained(AutoTokenizer, model_id, "OmDet-Turbo tokenizer")
        self.model = load_pretrained(AutoModelForZeroShotObjectDetection, model_id, "OmDet-Turbo model")
        if self.model.config.model_type != "omdet-turbo":
            raise ConfigError(f"model.model_id {model_id!r} is a {self.model.config.model_type!r} checkpoint, not "
                              f"'omdet-turbo'; choose the model option made for it (docs/counters.md)")
        self.model = self.model.to(device).eval()
        cfg = self.model.config
        # per query: the decoder's residual, attention and offsets, and its FFN
        self._pair_elements = cfg.num_queries * (4 * cfg.decoder_hidden_dim + cfg.decoder_dim_feedforward)
        self._task_lengths: dict[str, int] = {}
        self._text = EmbeddingCache(self._embed_texts)

    def _tokens(self, texts: list[str]):
        # the processor's text settings: padded to 77 tokens, truncated
        return self.tokenizer(texts, padding="max_length", truncation=True, max_length=77, return_tensors="pt")

    @device_step
    def _embed_texts(self, prompts: list[str]) -> torch.Tensor:
        """``(N, 78, D + 1)`` per prompt: row 0 its class embedding, rows 1.. its task features over the 77 token
        places (zero past the task's end) with the task mask in the last column."""
        backbone = self.model.language_backbone
        classes = self._tokens(list(prompts))
        tasks = self._tokens([self.task_template.format(p) for p in prompts])
        for p, n in zip(prompts, tasks["attention_mask"].sum(dim=1).tolist(), strict=True):
            self._task_lengths[p] = int(n)  # read on the host, before the tokens go to the device
        classes, tasks = classes.to(self.device), tasks.to(self.device)
        class_emb = backbone(classes["input_ids"], encode_type="class")
        task_feats, task_mask = backbone(tasks["input_ids"], mask=tasks["attention_mask"], encode_type="task")
        task_feats = task_feats.transpose(0, 1) * task_mask[..., None].to(task_feats.dtype)  # (N, L, D)
        n, length, d = task_feats.shape
        packed = torch.zeros((n, 78, d + 1), dtype=task_feats.dtype, device=task_feats.device)
        packed[:, 0, :d] = class_emb.to(task_feats.dtype)
        packed[:, 1:1 + length, :d] = task_feats
        packed[:, 1:1 + length, d] = task_mask.to(task_feats.dtype)
        return packed

    def _text_inputs(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``class_features (1, Q, D)``, ``task_features (L, Q, D)`` and ``task_mask (Q, L)`` as the decoder takes
        them: tasks cut to the longest of the batch and padded with zeros, as the model's own cache does."""
        rows = self._text(prompts)
        length = max(self._task_lengths[p] for p in prompts)
        d = rows.shape[-1] - 1
        class_features = rows[:, 0, :d][None]
        task_features = rows[:, 1:1 + length, :d].transpose(0, 1)
        task_mask = rows[:, 1:1 + length, d].to(torch.long)
        return class_features, task_features, task_mask

    @device_step
    def encode_images(self, items: Sequence[ImageItem]) -> list[ImageRef]:
        """Pixels on the device, then the backbone and the hybrid encoder over the images in calls sized by the
        device (``models.device_batch``); each image keeps the encoder's multi-scale states ``state<k>``."""
        per_call = images_per_call(self.image_batch_size, self.device, len(items), CPU_ITEM_BYTES)
        return encode_in_calls(items, per_call, self._encode)

    def _encode(self, batch: Sequence[ImageItem]) -> dict[str, torch.Tensor]:
        pixels, _ = grounding_dino_pixel_values([it.image for it in batch], self.image_processor, self.device)
        states = self.model.encoder(self.model.vision_backbone(pixels), return_dict=True).extracted_states
        return {f"state{k}": s for k, s in enumerate(states)}

    @device_step
    def scores_and_boxes(self, feat: ImageRef, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Query scores ``(Q, N)`` and normalised ``(cx, cy, w, h)`` boxes ``(Q, N, 4)`` of one image's prompts."""
        return self.pair_scores_and_boxes([feat] * len(prompts), prompts)

    @device_step
    def pair_scores_and_boxes(self, features: Sequence[ImageRef], prompts: Sequence[str]
                              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Query scores ``(P, N)`` and normalised boxes ``(P, N, 4)`` of ``P`` pairs of any images in one decoder
        call, each pair's encoder states gathered by row (``device_batch.pair_rows``)."""
        rows = pair_rows(features)
        class_features, task_features, task_mask = self._text_inputs(list(prompts))
        states = [rows.tensor(f"state{k}") for k in range(len(rows.stacked))]
        out = self.model.decoder(states, class_features, task_features, task_mask, return_dict=True)
        scores = torch.sigmoid(out.decoder_classes[-1][..., 0].float())
        return scores, out.decoder_coords[-1].float()

    def _calls(self, prompts: Sequence[str]) -> list[list[int]]:
        """Pair indices of each decoder call: pairs whose task has the same token length (no padding: each pair's
        task as the model takes it alone), over any images, in calls of at most ``DECODER_ELEMENTS`` activations.
        Every distinct prompt is embedded first, ``prompt_batch_size`` per text-encoder call."""
        names, _ = distinct(prompts)
        for part in runs(names, self.prompt_batch_size):
            self._text(list(part))
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            groups.setdefault(self._task_lengths[p], []).append(i)
        return [idx[part] for idx in groups.values()
                for part in element_calls(len(idx), self._pair_elements, DECODER_ELEMENTS)]

    @device_step
    def _kept(self, features: Sequence[ImageRef], prompts: Sequence[str], fetch):
        """The decoder over the pairs of several images per call (``_calls``); then the selection of every pair at
        once on the device and ``fetch(boxes, scores, order, keep)`` read in one transfer."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        calls = self._calls(prompts)
        parts = [self.pair_scores_and_boxes([features[i] for i in idx], [prompts[i] for i in idx]) for idx in calls]
        score, boxes = torch.cat([sc for sc, _ in parts]), torch.cat([bx for _, bx in parts])
        order = [i for idx in calls for i in idx]
        if order != list(range(len(order))):
            back = to_device(np.argsort(order, kind="stable"), score.device, torch.long)
            score, boxes = score.index_select(0, back), boxes.index_select(0, back)
        sizes = to_device([f.size for f in features], boxes.device, torch.float64)
        pix = boxes_from_cxcywh(boxes, sizes[:, None, :])
        return fetch_selected(pix, score, sizes, self.score_threshold, self.nms_iou, fetch)
