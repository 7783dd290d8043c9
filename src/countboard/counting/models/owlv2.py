"""OWLv2 (open-vocabulary detector) as a detect-then-count counter.

The ViT image encoder runs once per image (``encode_images``) and yields, per patch, the class-head input and a
predicted box; the images are resized, padded and normalised on the model's device
(``countboard.models.preprocess.owlv2_pixel_values``, equal to the processor's within float rounding). ``decode``
embeds the distinct prompts in one text batch (cached across calls) and scores every patch of an image against all
of its prompts in one class-head call. Patches scoring above ``score_threshold`` whose box centre lies in the image
(not in the square padding) and that survive NMS are counted as one object each, with unit mass at the box centre.
Thresholding, the centre test and NMS run for all pairs of a batch at once on the device
(``detect_count.select_detections_batched``), with one transfer to the host per batch. Scores and boxes equal
transformers' ``zero-shot-object-detection`` pipeline and ``post_process_object_detection`` on the same inputs; the
centre test and NMS are the intended differences (docs/counters.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from countboard.counting.models.detect_count import DetectionDecoding, boxes_from_cxcywh, fetch_selected
from countboard.counting.models.prompt_batching import EmbeddingCache, pooled_text_features
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.device_batch import (
    ImageRef,
    check_setting,
    device_step,
    distinct,
    encode_in_calls,
    images_per_call,
    pair_rows,
    vit_image_bytes,
)
from countboard.models.hf_loading import load_processor_and_model
from countboard.models.preprocess import owlv2_pixel_values
from countboard.models.transfer import to_device

#: Elements of the class head's largest output (images x patches x prompts) in one call.
HEAD_ELEMENTS = 2**26


class Owlv2Counter(DetectionDecoding, Counter):
    """Counts the OWLv2 detections of a text prompt.

    Args:
        model_id: Hub id or local directory with an ``Owlv2ForObjectDetection`` and its processor.
        score_threshold: A counted detection's sigmoid class score is above it (strictly, as in transformers).
        nms_iou: IoU above which overlapping detections are merged (``1.0`` disables NMS).
        prompt_template: Format string applied to each prompt (``"{}"`` keeps it as given).
        image_batch_size: Images per vision-encoder call in ``encode_images``: ``auto`` (sized by the device,
            ``models.device_batch``) or a number.
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = Owlv2Counter("google/owlv2-base-patch16-ensemble")  # doctest: +SKIP
        >>> counter.count([item, item], ["apples", "zebras"])  # doctest: +SKIP
        array([12., 0.])
    """

    caches_image_features = True

    def __init__(self, model_id: str = "google/owlv2-base-patch16-ensemble", score_threshold: float = 0.2,
                 nms_iou: float = 0.5, prompt_template: str = "{}", image_batch_size: int | str = "auto",
                 device: str = "cpu"):
        super().__init__(device=device)
        from transformers import Owlv2ForObjectDetection, Owlv2Processor

        self.model_id = model_id
        self.score_threshold = float(score_threshold)
        self.nms_iou = float(nms_iou)
        self.prompt_template = prompt_template
        self.image_batch_size = check_setting(image_batch_size)
        self.processor, self.model = load_processor_and_model(Owlv2Processor, Owlv2ForObjectDetection, model_id,
                                                              "OWLv2", device)
        self._image_bytes = vit_image_bytes(self.model.config.vision_config)
        self._text = EmbeddingCache(self._embed_texts)

    @device_step
    def _embed_texts(self, prompts: list[str]) -> torch.Tensor:
        return pooled_text_features(self.model.owlv2, self.processor.tokenizer,
                                    [self.prompt_template.format(p) for p in prompts],
                                    self.model.config.text_config.max_position_embeddings, self.device,
                                    padding="max_length")

    @device_step
    def encode_images(self, items: Sequence[ImageItem]) -> list[ImageRef]:
        """Preprocess on the device, run the vision encoder and the box head over the images in calls sized by the
        device (``models.device_batch``); each image keeps ``patch_feats`` ``(P, D)`` (the class head's input) and
        ``boxes`` ``(P, 4)`` (float64 pixel ``(y0, x0, y1, x1)`` in the original image)."""
        per_call = images_per_call(self.image_batch_size, self.device, len(items), self._image_bytes)
        return encode_in_calls(items, per_call, self._encode)

    def _encode(self, batch: Sequence[ImageItem]) -> dict[str, torch.Tensor]:
        pixels = owlv2_pixel_values([it.image for it in batch], self.processor.image_processor, self.device)
        feature_map, _ = self.model.image_embedder(pixel_values=pixels)
        b, gh, gw, d = feature_map.shape
        patch_feats = feature_map.reshape(b, gh * gw, d)
        pred_boxes = self.model.box_predictor(patch_feats, feature_map).float()
        # the processor pads to a square at the bottom/right
        side = to_device([[float(max(it.size))] * 2 for it in batch], pred_boxes.device, torch.float64)
        return {"patch_feats": patch_feats, "boxes": boxes_from_cxcywh(pred_boxes, side[:, None, :])}

    def _class_probs(self, feats: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """``(B, P, Q)`` sigmoid class scores of ``(B, P, D)`` patch features against ``(B, Q, D)`` queries.

        In float32, outside autocast: features cached in bf16 (encoded under autocast) and text embeddings (of
        whatever precision filled the cache) meet in one dtype, and the head's einsum is not one CUDA autocast
        casts (in bf16 it met a bf16 and a float32 operand); it is a small part of the work."""
        with torch.autocast(feats.device.type, enabled=False):
            logits, _ = self.model.class_predictor(feats.float(), queries.float())
        return torch.sigmoid(logits.float())

    def _scored(self, features: Sequence[ImageRef], prompts: Sequence[str]):
        """Boxes, scores and image sizes of every pair, on the device (nothing waits).

        The class head runs over all pairs of the call at once: over every image x every distinct prompt when the
        pairs cover most of those combinations (the negative-label test), else over the pairs themselves (one
        image, one prompt each), in calls of at most ``HEAD_ELEMENTS`` scores."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        rows = pair_rows(features)
        names, which = distinct(prompts)
        queries = self._text(names)
        feats = rows.stacked["patch_feats"]
        n_patches, dev = feats.shape[1], feats.device
        if 2 * len(prompts) >= rows.images * len(names):
            per_call = max(1, HEAD_ELEMENTS // (n_patches * len(names)))
            probs = torch.cat([self._class_probs(part, queries[None].expand(len(part), -1, -1))
                               for part in feats.split(per_call)])
            score = probs[rows.rows, :, to_device(which, dev, torch.long)]
        else:
            q = to_device(which, dev, torch.long)
            per_call = max(1, HEAD_ELEMENTS // (n_patches * feats.shape[2]))
            score = torch.cat([self._class_probs(feats.index_select(0, rows.rows[k:k + per_call]),
                                                 queries.index_select(0, q[k:k + per_call])[:, None])[..., 0]
                               for k in range(0, len(prompts), per_call)])
        sizes = to_device(rows.sizes, dev, torch.float64)
        return rows.tensor("boxes"), score, sizes

    @device_step
    def _kept(self, features, prompts, fetch):
        """``fetch(boxes, scores, order, keep)`` of every pair's selection, read in one transfer."""
        boxes, score, sizes = self._scored(features, prompts)
        return fetch_selected(boxes, score, sizes, self.score_threshold, self.nms_iou, fetch)
