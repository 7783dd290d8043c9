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
from dataclasses import dataclass

import torch

from countboard.counting.models.detect_count import DetectionDecoding, boxes_from_cxcywh, fetch_selected
from countboard.counting.models.prompt_batching import EmbeddingCache, group_by_image, pooled_text_features
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.hf_loading import load_processor_and_model
from countboard.models.preprocess import owlv2_pixel_values
from countboard.models.transfer import to_device


@dataclass
class OwlImageFeatures:
    """What OWLv2 keeps of one image between prompts (on the model's device).

    Attributes:
        patch_feats: ``(P, D)`` patch embeddings (the class head's input).
        boxes: ``(P, 4)`` float64 pixel boxes ``(y0, x0, y1, x1)`` in the original image.
        size: ``(H, W)`` of the original image.
    """

    patch_feats: torch.Tensor
    boxes: torch.Tensor
    size: tuple[int, int]


class Owlv2Counter(DetectionDecoding, Counter):
    """Counts the OWLv2 detections of a text prompt.

    Args:
        model_id: Hub id or local directory with an ``Owlv2ForObjectDetection`` and its processor.
        score_threshold: A counted detection's sigmoid class score is above it (strictly, as in transformers).
        nms_iou: IoU above which overlapping detections are merged (``1.0`` disables NMS).
        prompt_template: Format string applied to each prompt (``"{}"`` keeps it as given).
        image_batch_size: Images per vision-encoder batch in ``encode_images``.
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = Owlv2Counter("google/owlv2-base-patch16-ensemble")  # doctest: +SKIP
        >>> counter.count([item, item], ["apples", "zebras"])  # doctest: +SKIP
        array([12., 0.])
    """

    caches_image_features = True

    def __init__(self, model_id: str = "google/owlv2-base-patch16-ensemble", score_threshold: float = 0.2,
                 nms_iou: float = 0.5, prompt_template: str = "{}", image_batch_size: int = 2, device: str = "cpu"):
        super().__init__(device=device)
        from transformers import Owlv2ForObjectDetection, Owlv2Processor

        self.model_id = model_id
        self.score_threshold = float(score_threshold)
        self.nms_iou = float(nms_iou)
        self.prompt_template = prompt_template
        self.image_batch_size = int(image_batch_size)
        self.processor, self.model = load_processor_and_model(Owlv2Processor, Owlv2ForObjectDetection, model_id,
                                                              "OWLv2", device)
        self._text = EmbeddingCache(self._embed_texts)

    @torch.inference_mode()
    def _embed_texts(self, prompts: list[str]) -> torch.Tensor:
        return pooled_text_features(self.model.owlv2, self.processor.tokenizer,
                                    [self.prompt_template.format(p) for p in prompts],
                                    self.model.config.text_config.max_position_embeddings, self.device,
                                    padding="max_length")

    @torch.inference_mode()
    def encode_images(self, items: Sequence[ImageItem]) -> list[OwlImageFeatures]:
        """Preprocess on the device, run the vision encoder and the box head once per image."""
        feats: list[OwlImageFeatures] = []
        for start in range(0, len(items), self.image_batch_size):
            batch = items[start:start + self.image_batch_size]
            pixels = owlv2_pixel_values([it.image for it in batch], self.processor.image_processor, self.device)
            feature_map, _ = self.model.image_embedder(pixel_values=pixels)
            b, gh, gw, d = feature_map.shape
            patch_feats = feature_map.reshape(b, gh * gw, d)
            pred_boxes = self.model.box_predictor(patch_feats, feature_map).float()
            # the processor pads to a square at the bottom/right
            side = to_device([[float(max(it.size))] * 2 for it in batch], pred_boxes.device, torch.float64)
            boxes = boxes_from_cxcywh(pred_boxes, side[:, None, :])
            feats.extend(OwlImageFeatures(pf, bx, it.size) for it, pf, bx in zip(batch, patch_feats, boxes,
                                                                                  strict=True))
        return feats

    def _scored(self, features: Sequence[OwlImageFeatures], prompts: Sequence[str]):
        """Boxes, scores and image sizes of every pair, on the device (nothing waits)."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        scores: list[torch.Tensor | None] = [None] * len(prompts)
        for feat, idx in group_by_image(features):
            queries = self._text([prompts[i] for i in idx])
            # the class head in float32, outside autocast: cached image features (bf16 under autocast) and text
            # embeddings (of whatever precision filled the cache) meet in one dtype, and its einsum is not one CUDA
            # autocast casts (on a GPU in bf16 it met a bf16 and a float32 operand); it is a small part of the work
            with torch.autocast(feat.patch_feats.device.type, enabled=False):
                logits, _ = self.model.class_predictor(feat.patch_feats[None].float(), queries[None].float())
            probs = torch.sigmoid(logits[0].float())  # (P, Q)
            for q, i in enumerate(idx):
                scores[i] = probs[:, q]
        boxes = torch.stack([f.boxes for f in features])
        sizes = to_device([f.size for f in features], boxes.device, torch.float64)
        return boxes, torch.stack(scores), sizes

    @torch.inference_mode()
    def _kept(self, features, prompts, fetch):
        """``fetch(boxes, scores, order, keep)`` of every pair's selection, read in one transfer."""
        boxes, score, sizes = self._scored(features, prompts)
        return fetch_selected(boxes, score, sizes, self.score_threshold, self.nms_iou, fetch)

