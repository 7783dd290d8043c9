"""SAM 3 (promptable concept segmentation) as a counter: a text concept gives every matching instance.

``Sam3Model`` scores each of its DETR queries against the text (``pred_logits``) and the whole image with one
presence token (``presence_logits``: is the concept in the image at all?). An instance's score is the product of
the two sigmoids, as in ``Sam3Processor.post_process_instance_segmentation``; instances scoring above
``score_threshold`` whose box centre lies in the image (and that survive NMS when ``nms_iou < 1``; SAM 3 predicts
one query per object, so it is off by default) are counted, unit mass at each box centre. For the negative-label
test the presence score is the model's own answer to "is there any?".

The ViT backbone and its FPN run once per image (``encode_images`` through ``get_vision_features``); ``decode`` runs
the DETR encoder, decoder and scoring for all prompts of an image in one batch over those features (the model's
``vision_embeds`` input, broadcast to the batch). Each prompt's text features are computed once (the processor
pads every prompt to 32 tokens) and cached. The mask decoder still runs inside the forward; its masks are not read.

Pixels are the image processor's own (:func:`sam3_pixel_values`): ``Sam3ImageProcessor`` is a torchvision backend
whose antialiased bilinear resize differs from PIL's by up to two grey levels on upscaled images (measured on the
tiny model of the tests), so it is called as it is, on the CPU, and its pixels moved to the device.

SAM 3's image processor and model need torchvision (a CUDA build where there is a GPU, kept out of the base
install): ``pip install 'countboard[sam3]'`` (``preflight`` says so in one line before any run is created).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from countboard.batching import CPU_ITEM_BYTES
from countboard.counting.models.detect_count import DetectionDecoding, fetch_selected
from countboard.counting.models.prompt_batching import EmbeddingCache, group_by_image
from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.models.base import Counter, check_one_prompt_each
from countboard.models.device_batch import check_setting, device_step, images_per_call
from countboard.models.hf_loading import load_processor_and_model
from countboard.models.preprocess import vit_pixel_values
from countboard.models.transfer import to_device

#: Tokens every prompt is padded to (``Sam3Processor``'s text setting).
TEXT_LENGTH = 32


def torchvision_missing_message() -> str | None:
    """The one-line reason SAM 3 cannot run here, or None when torchvision is importable."""
    if importlib.util.find_spec("torchvision") is not None:
        return None
    return ("model=sam3 needs torchvision (transformers' Sam3 image processor and model import it), which is not "
            "installed: pip install 'countboard[sam3]', or the torchvision build matching your torch (a CUDA build "
            "on a GPU machine)")


def sam3_pixel_values(images, image_processor, device: str) -> torch.Tensor:
    """``pixel_values`` on ``device`` exactly as ``image_processor`` makes them: a torchvision-backend processor
    (SAM 3's) is called itself; a PIL-style ViT processor goes through ``vit_pixel_values`` (bit for bit the same)."""
    if any(cls.__name__ == "TorchvisionBackend" for cls in type(image_processor).__mro__):
        return image_processor(images=list(images), return_tensors="pt")["pixel_values"].to(device)
    return vit_pixel_values(images, image_processor, device)


@dataclass
class Sam3ImageFeatures:
    """The vision encoder's output of one image (``Sam3VisionEncoderOutput``, batch of 1, on the model's device)."""

    vision: Any
    size: tuple[int, int]


def instance_scores(pred_logits: torch.Tensor, presence_logits: torch.Tensor | None) -> torch.Tensor:
    """``(B, Q)`` instance scores: ``sigmoid(pred_logits) * sigmoid(presence_logits)`` (the processor's).

    Example:
        >>> instance_scores(torch.zeros(1, 2), torch.zeros(1, 1)).tolist()
        [[0.25, 0.25]]
    """
    scores = torch.sigmoid(pred_logits.float())
    if presence_logits is not None:
        scores = scores * torch.sigmoid(presence_logits.float()).reshape(-1, 1)
    return scores


def pixel_boxes(pred_boxes: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """Normalised ``(x0, y0, x1, y1)`` boxes ``(B, Q, 4)`` to float64 pixel ``(y0, x0, y1, x1)`` boxes of images
    of ``(H, W)`` ``sizes`` ``(B, 2)`` (the processor's ``_scale_boxes``, in the order ``detect_count`` reads).

    Example:
        >>> pixel_boxes(torch.tensor([[[0.0, 0.5, 0.5, 1.0]]]), torch.tensor([[10.0, 20.0]])).tolist()
        [[[5.0, 0.0, 10.0, 10.0]]]
    """
    b = pred_boxes.to(torch.float64)
    h, w = sizes[:, None, 0:1].to(torch.float64), sizes[:, None, 1:2].to(torch.float64)
    return torch.cat([b[..., 1:2] * h, b[..., 0:1] * w, b[..., 3:4] * h, b[..., 2:3] * w], dim=-1)


def broadcast_vision(vision: Any, batch: int) -> Any:
    """A ``Sam3VisionEncoderOutput`` of one image with its FPN maps and position encodings expanded to ``batch``
    (views: nothing is copied)."""
    from transformers.models.sam3.modeling_sam3 import Sam3VisionEncoderOutput

    def expand(ts):
        return tuple(t.expand(batch, *t.shape[1:]) for t in ts)

    return Sam3VisionEncoderOutput(last_hidden_state=vision.last_hidden_state,
                                   fpn_hidden_states=expand(vision.fpn_hidden_states),
                                   fpn_position_encoding=expand(vision.fpn_position_encoding))


class Sam3Counter(DetectionDecoding, Counter):
    """Counts the instances SAM 3 segments for a text concept.

    Args:
        model_id: Hub id or local directory with a ``Sam3Model`` and its ``Sam3Processor``.
        score_threshold: A counted instance's score (query times presence) is above it (strictly).
        nms_iou: IoU above which overlapping boxes are merged (``1.0``, the default, keeps every instance).
        prompt_template: Format string applied to each prompt (SAM 3 takes short noun phrases).
        prompt_batch_size: Prompts per DETR batch.
        image_batch_size: Images per vision-encoder batch in ``encode_images``.
        device: ``"cpu"`` or ``"cuda"``.

    Example:
        >>> counter = Sam3Counter("facebook/sam3", device="cuda")  # doctest: +SKIP
        >>> counter.count([item, item], ["apples", "zebras"])  # doctest: +SKIP
        array([12., 0.])
    """

    caches_image_features = True

    def __init__(self, model_id: str = "facebook/sam3", score_threshold: float = 0.5, nms_iou: float = 1.0,
                 prompt_template: str = "{}", prompt_batch_size: int = 8, image_batch_size: int | str = "auto",
                 device: str = "cpu"):
        super().__init__(device=device)
        missing = torchvision_missing_message()
        if missing:
            raise ConfigError(missing)
        from transformers import Sam3Model, Sam3Processor

        self.processor, self.model = load_processor_and_model(Sam3Processor, Sam3Model, model_id, "SAM 3", device)
        self.configure(model_id, score_threshold, nms_iou, prompt_template, prompt_batch_size, image_batch_size)

    def configure(self, model_id: str, score_threshold: float, nms_iou: float, prompt_template: str,
                  prompt_batch_size: int, image_batch_size: int | str) -> None:
        """Settings and caches (apart from loading, so a test can give the adapter a model of its own)."""
        self.model_id = model_id
        self.score_threshold = float(score_threshold)
        self.nms_iou = float(nms_iou)
        self.prompt_template = prompt_template
        self.prompt_batch_size = int(prompt_batch_size)
        self.image_batch_size = check_setting(image_batch_size)
        self._text = EmbeddingCache(self._embed_texts)

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        missing = torchvision_missing_message()
        if missing:
            raise ConfigError(missing)
        super().preflight(node)

    @device_step
    def _embed_texts(self, prompts: list[str]) -> torch.Tensor:
        """``(N, 32, D + 1)``: each prompt's projected text features, its attention mask in the last column."""
        tok = self.processor.tokenizer([self.prompt_template.format(p) for p in prompts], padding="max_length",
                                       max_length=TEXT_LENGTH, truncation=True, return_tensors="pt").to(self.device)
        feats = self.model.get_text_features(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"],
                                             return_dict=True).pooler_output
        return torch.cat([feats, tok["attention_mask"][..., None].to(feats.dtype)], dim=-1)

    @device_step
    def encode_images(self, items: Sequence[ImageItem]) -> list[Sam3ImageFeatures]:
        """Pixels (:func:`sam3_pixel_values`: the processor's own), then the vision encoder once per image."""
        from transformers.models.sam3.modeling_sam3 import Sam3VisionEncoderOutput

        feats: list[Sam3ImageFeatures] = []
        per_call = images_per_call(self.image_batch_size, self.device, len(items), CPU_ITEM_BYTES)
        for start in range(0, len(items), per_call):
            batch = items[start:start + per_call]
            pixels = sam3_pixel_values([it.image for it in batch], self.processor.image_processor, self.device)
            vision = self.model.get_vision_features(pixel_values=pixels)
            for k, it in enumerate(batch):
                one = Sam3VisionEncoderOutput(
                    last_hidden_state=vision.last_hidden_state[k:k + 1],
                    fpn_hidden_states=tuple(t[k:k + 1] for t in vision.fpn_hidden_states),
                    fpn_position_encoding=tuple(t[k:k + 1] for t in vision.fpn_position_encoding))
                feats.append(Sam3ImageFeatures(one, it.size))
        return feats

    @device_step
    def outputs(self, feat: Sam3ImageFeatures, prompts: Sequence[str]):
        """``Sam3ImageSegmentationOutput`` of one image's prompts (batch = prompts) over its cached features."""
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        packed = self._text(list(prompts))
        text = BaseModelOutputWithPooling(pooler_output=packed[..., :-1])
        return self.model(vision_embeds=broadcast_vision(feat.vision, len(prompts)), text_embeds=text,
                          attention_mask=packed[..., -1].to(torch.long))

    @device_step
    def _kept(self, features: Sequence[Sam3ImageFeatures], prompts: Sequence[str], fetch):
        """The DETR stages once per chunk of an image's prompts; then every pair's instances through the shared
        selection on the device, ``fetch(boxes, scores, order, keep)`` read in one transfer."""
        check_one_prompt_each(features, prompts, "image features", "pair")
        scores: list[torch.Tensor | None] = [None] * len(prompts)
        boxes: list[torch.Tensor | None] = [None] * len(prompts)
        for feat, idx in group_by_image(features):
            for k in range(0, len(idx), self.prompt_batch_size):
                chunk = idx[k:k + self.prompt_batch_size]
                out = self.outputs(feat, [prompts[i] for i in chunk])
                sc = instance_scores(out.pred_logits, out.presence_logits)
                for q, i in enumerate(chunk):
                    scores[i], boxes[i] = sc[q], out.pred_boxes[q]
        sizes = to_device([f.size for f in features], scores[0].device, torch.float64)
        pix = pixel_boxes(torch.stack(boxes), sizes)
        return fetch_selected(pix, torch.stack(scores), sizes, self.score_threshold, self.nms_iou, fetch)
