"""GradCAM of BLIP's image-text matching (ITM) score on the text encoder's cross-attention to image patches.

As in the original BLIP/ALBEF GradCAM: at one cross-attention block of the text encoder, the attention
probabilities from text tokens to image patches are multiplied by their clamped-positive gradients of the ITM
"match" logit, averaged over heads and over the phrase's tokens, and reshaped to the patch grid. The ITM head reads
only the first token of the last layer, so the target block must lie below the last one for the phrase tokens'
attention to carry gradient.

Text as LAVIS passes it: the phrase is cleaned by ``BlipCaptionProcessor.pre_caption`` (lower case, ``.!"()*#:;~``
replaced by spaces, spaces collapsed, at most 50 words: :func:`pre_caption`), and the first token of the
ITM input is BLIP's ``[ENC]`` token instead of ``[CLS]`` (``BlipITM.forward``: ``encoder_input_ids[:, 0] =
enc_token_id``; transformers' ``BlipForImageTextRetrieval`` passes the tokenizer's ``[CLS]``). Both are on by
default (``model.clean_caption``, ``model.enc_token``).

Block: LAVIS's ``compute_gradcam`` (which the Q-GroundCAM BLIP maps come from) defaults to cross-attention block 6
of the 12-layer text encoder, and that is the default here; ALBEF's grounding demo uses block 8. The block is
``model.target_layer`` and every run's ``explainer_detail`` tag names it.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from countboard.grounding.models.gradcam import ActivationCapture, VitCamModel, check_upsample, pixel_batch

#: LAVIS ``BlipCaptionProcessor``'s ``max_words``.
CAPTION_MAX_WORDS = 50


def pre_caption(caption: str, max_words: int = CAPTION_MAX_WORDS) -> str:
    """LAVIS ``BlipCaptionProcessor.pre_caption``: lower case, ``.!"()*#:;~`` to spaces, runs of spaces to one,
    stripped, the first ``max_words`` words.

    Example:
        >>> pre_caption("The  RED circle (left).")
        'the red circle left'
    """
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption).rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else caption


def enc_token_id(tokenizer, text_config) -> int:
    """BLIP's ``[ENC]`` id: the tokenizer's ``[ENC]`` when it has one, else LAVIS's layout (``[DEC]`` = the text
    config's ``bos_token_id`` right after BERT's vocabulary, ``[ENC]`` after it); a ``ConfigError`` when that id is
    outside the text model's vocabulary."""
    from countboard.errors import ConfigError

    vocab = tokenizer.get_vocab()
    token = vocab.get("[ENC]")
    if token is None:
        token = int(text_config.bos_token_id) + 1
    if not 0 <= token < int(text_config.vocab_size):
        raise ConfigError(f"BLIP's [ENC] token (id {token}) is outside the text model's vocabulary of "
                          f"{text_config.vocab_size}: set model.enc_token=false for this checkpoint")
    return int(token)


#: LAVIS ``compute_gradcam``'s default: cross-attention block 6 of the 12-layer text encoder.
DEFAULT_LAYER = "text_encoder.encoder.layer.6.crossattention.self"
LAVIS_BLOCK = 6


def cross_attention_gradcam(attn: torch.Tensor, grads: torch.Tensor, mask: torch.Tensor,
                            grid: tuple[int, int]) -> torch.Tensor:
    """``(B, gh, gw)`` maps from cross-attention ``attn`` and its gradient, both ``(B, heads, T, 1 + N)``.

    Tokens kept by ``mask`` (``(B, T)``, 1 for the phrase's words; the first and last — [CLS]/[SEP] — dropped by
    the caller) are averaged; the first image token (CLS) is dropped.

    Example:
        >>> a = torch.zeros(1, 1, 3, 5); a[0, 0, 1, 3] = 1.0
        >>> cross_attention_gradcam(a, torch.ones_like(a), torch.tensor([[0, 1, 0]]), (2, 2))[0].tolist()
        [[0.0, 0.0], [1.0, 0.0]]
    """
    b = attn.shape[0]
    cam = (attn[..., 1:].float() * grads[..., 1:].float().clamp(min=0)).mean(dim=1)
    w = mask.float()[:, :, None]
    cam = (cam * w).sum(dim=1) / w.sum(dim=1).clamp(min=1)
    return cam.reshape(b, *grid)


def cross_attention_block_label(target_layer: str) -> str:
    """How the target block compares with LAVIS's default, for the run's ``explainer_detail`` tag.

    Example:
        >>> cross_attention_block_label("text_encoder.encoder.layer.8.crossattention.self")
        'cross-attention block 8 (LAVIS default: 6)'
    """
    match = re.search(r"layer\.(-?\d+)\.crossattention", target_layer)
    if match is None:
        return f"layer {target_layer}"
    block = int(match.group(1))
    return f"cross-attention block {block} ({'LAVIS default' if block == LAVIS_BLOCK else 'LAVIS default: 6'})"


class BlipGradCAM(VitCamModel):
    """GradCAM maps of BLIP ITM for a ``BlipForImageTextRetrieval`` checkpoint.

    Args:
        model_id: Hub id or local directory (default ``Salesforce/blip-itm-base-coco``).
        target_layer: Dotted path of a cross-attention ``self`` module of the text encoder (block 6 by default,
            LAVIS's; ALBEF's demo uses 8).
        batch_size: Samples per forward/backward pass.
        upsample: Patch-grid to image resizing: ``bicubic_clip`` (LAVIS ``getAttMap`` without its blur),
            ``bicubic_clip_blur`` (with it, ``getAttMap``'s default), or another of ``gradcam.UPSAMPLE_METHODS``.
        clean_caption: Clean each phrase with LAVIS's :func:`pre_caption`.
        enc_token: Put BLIP's ``[ENC]`` token first, as LAVIS's ``BlipITM`` (else the tokenizer's ``[CLS]``).
        device: ``"cpu"`` or ``"cuda"``.
    """

    explainer_method = "cross_attention_gradcam"

    def __init__(self, model_id: str = "Salesforce/blip-itm-base-coco", target_layer: str = DEFAULT_LAYER,
                 batch_size: int = 4, upsample: str = "bicubic_clip", clean_caption: bool = True,
                 enc_token: bool = True, device: str = "cpu"):
        from transformers import AutoTokenizer, BlipForImageTextRetrieval, BlipImageProcessor

        super().__init__(device)
        self.upsample = check_upsample(upsample)
        model = BlipForImageTextRetrieval.from_pretrained(model_id)
        self.tokenizer = AutoTokenizer.from_pretrained(model_id)
        proc = BlipImageProcessor.from_pretrained(model_id)
        self._bind(model, proc.image_mean, proc.image_std, target_layer, batch_size)
        self.clean_caption = bool(clean_caption)
        self.enc_token = enc_token_id(self.tokenizer, self.model.config.text_config) if enc_token else None

    def explainer_detail(self) -> str:
        text = ", ".join(part for part, on in (("pre_caption", self.clean_caption), ("[ENC] first",
                                                                                    self.enc_token is not None)) if on)
        return (f"BLIP ITM, {cross_attention_block_label(self.target_layer)}, "
                f"{self.grid[0]}x{self.grid[1]} patches, upsample {self.upsample}, text: {text or 'as given'}")

    def _cams(self, images: list[np.ndarray], phrases: list[str]) -> torch.Tensor:
        pixels = pixel_batch(images, self.input_size, self.mean, self.std).to(self.device)
        if self.clean_caption:
            phrases = [pre_caption(p) for p in phrases]
        text = self.tokenizer(phrases, padding=True, truncation=True, max_length=35, return_tensors="pt")
        ids, att = text["input_ids"].to(self.device), text["attention_mask"].to(self.device)
        if self.enc_token is not None:
            ids = ids.clone()
            ids[:, 0] = self.enc_token
        self.model.zero_grad(set_to_none=True)
        with torch.enable_grad(), ActivationCapture(self.layer, select=lambda out: out[1]) as cap:
            out = self.model(input_ids=ids, attention_mask=att, pixel_values=pixels, use_itm_head=True)
            out.itm_score[:, 1].sum().backward()
        attn, grads = cap.tensors()
        words = att.clone()
        words[:, 0] = 0
        words[torch.arange(len(ids)), att.sum(dim=1) - 1] = 0  # [SEP]
        return cross_attention_gradcam(attn, grads, words, self.grid)
