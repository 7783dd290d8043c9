"""GradCAM of CLIP's image-text similarity (ViT image tower, tokens reshaped to the patch grid).

``ClipGradCAM`` loads a checkpoint by hub id or local path (``openai/clip-vit-base-patch16`` by default).
``TinyRandomClipGradCAM`` builds a seeded, randomly initialised tiny CLIP in memory with a word-hashing tokenizer,
for offline pipeline checks: its maps carry no information about CLIP and its leaderboard numbers mean nothing.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import torch

from countboard.grounding.models.gradcam import (
    ActivationCapture,
    VitCamModel,
    check_upsample,
    pixel_batch,
    token_gradcam,
)

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
#: Last block's first LayerNorm: the usual GradCAM layer for ViTs (its output feeds the attention that forms CLS).
DEFAULT_LAYER = "vision_model.encoder.layers.-1.layer_norm1"


class ClipGradCAM(VitCamModel):
    """GradCAM maps of ``logit(image, phrase)`` for a CLIP ViT checkpoint.

    Args:
        model_id: Hub id or local directory with the model, tokenizer and image-processor files.
        target_layer: Dotted module path whose ``(B, 1 + N, C)`` token output is explained.
        batch_size: Samples per forward/backward pass.
        upsample: Token-grid to image resizing, ``bicubic_clip`` (LAVIS ``getAttMap`` without its blur, as the BLIP
            GradCAM; docs/grounding.md says which code each choice follows) or another of ``UPSAMPLE_METHODS``
            (see ``countboard.grounding.models.gradcam.upsample_map``).
        device: ``"cpu"`` or ``"cuda"``.
    """

    explainer_method = "gradcam"

    def __init__(self, model_id: str = "openai/clip-vit-base-patch16", target_layer: str = DEFAULT_LAYER,
                 batch_size: int = 8, upsample: str = "bicubic_clip", device: str = "cpu"):
        from transformers import AutoTokenizer, CLIPImageProcessor, CLIPModel

        super().__init__(device)
        self.upsample = check_upsample(upsample)
        model = CLIPModel.from_pretrained(model_id)
        tokenizer = AutoTokenizer.from_pretrained(model_id)
        proc = CLIPImageProcessor.from_pretrained(model_id)

        def tokenize(texts: Sequence[str]) -> dict[str, torch.Tensor]:
            return dict(tokenizer(list(texts), padding=True, truncation=True, return_tensors="pt"))

        self._setup(model, tokenize, proc.image_mean, proc.image_std, target_layer, batch_size)

    def explainer_detail(self) -> str:
        return f"CLIP ViT {self.target_layer}, {self.grid[0]}x{self.grid[1]} tokens, upsample {self.upsample}"

    def _setup(self, model, tokenize, mean, std, target_layer: str, batch_size: int) -> None:
        self._bind(model, mean, std, target_layer, batch_size)
        for p in self.model.parameters():
            p.requires_grad_(True)
        self.tokenize = tokenize

    def _similarity_grads(self, images: list[np.ndarray], phrases: list[str]
                          ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """Model inputs, and the target layer's tokens with their gradient of the summed image-phrase logits.

        Returns:
            ``(pixels, text, acts, grads)``: the ``(B, 3, h, w)`` input, the tokenized phrases on the device, and
            the ``(B, 1 + N, C)`` layer output with its gradient.
        """
        pixels = pixel_batch(images, self.input_size, self.mean, self.std).to(self.device)
        text = {k: v.to(self.device) for k, v in self.tokenize(phrases).items()}
        self.model.zero_grad(set_to_none=True)
        with torch.enable_grad(), ActivationCapture(self.layer) as cap:
            out = self.model(pixel_values=pixels, **text)
            out.logits_per_image.diagonal().sum().backward()
        acts, grads = cap.tensors()
        return pixels, text, acts, grads

    def _cams(self, images: list[np.ndarray], phrases: list[str]) -> torch.Tensor:
        _, _, acts, grads = self._similarity_grads(images, phrases)
        return token_gradcam(acts, grads, self.grid)


class HashWordTokenizer:
    """Offline tokenizer for random-weight models: lower-cased words hashed (CRC32) into the vocabulary.

    Ids: 0 padding, 1 start, ``vocab_size - 1`` end; words take ``2 .. vocab_size - 2``.

    Example:
        >>> t = HashWordTokenizer(vocab_size=100, max_length=6)
        >>> ids = t(["the red circle"])["input_ids"]
        >>> ids.shape, int(ids[0, 0]), int(ids[0, 4])
        (torch.Size([1, 5]), 1, 99)
    """

    def __init__(self, vocab_size: int = 512, max_length: int = 16):
        self.vocab_size, self.max_length = int(vocab_size), int(max_length)

    def encode(self, text: str) -> list[int]:
        words = [zlib.crc32(w.encode()) % (self.vocab_size - 3) + 2 for w in text.lower().split()]
        return [1, *words[: self.max_length - 2], self.vocab_size - 1]

    def __call__(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        seqs = [self.encode(t) for t in texts]
        n = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), n), dtype=torch.long)
        mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for k, s in enumerate(seqs):
            ids[k, : len(s)] = torch.tensor(s)
            mask[k, : len(s)] = 1
        return {"input_ids": ids, "attention_mask": mask}


def tiny_clip_config(seed_vocab: int = 512, image_size: int = 64, patch_size: int = 8, hidden_size: int = 32,
                     num_layers: int = 2, num_heads: int = 2, max_length: int = 16):
    """A ``CLIPConfig`` with tiny towers (a few hundred thousand parameters)."""
    from transformers import CLIPConfig

    common = {"hidden_size": hidden_size, "intermediate_size": 2 * hidden_size, "num_hidden_layers": num_layers,
              "num_attention_heads": num_heads}
    text = {**common, "vocab_size": seed_vocab, "max_position_embeddings": max_length, "pad_token_id": 0,
            "bos_token_id": 1, "eos_token_id": seed_vocab - 1}
    vision = {**common, "image_size": image_size, "patch_size": patch_size}
    return CLIPConfig(text_config=text, vision_config=vision, projection_dim=hidden_size)


class TinyRandomClipGradCAM(ClipGradCAM):
    """RANDOM WEIGHTS: a seeded tiny CLIP built in memory, for offline runs of the pipeline (not a CLIP result).

    Args:
        seed: Initialisation seed (the global torch RNG is left untouched).
        image_size, patch_size, hidden_size, num_layers, num_heads, vocab_size: Tiny architecture.
        target_layer, batch_size, upsample, device: As in ``ClipGradCAM``.
    """

    def __init__(self, seed: int = 0, image_size: int = 64, patch_size: int = 8, hidden_size: int = 32,
                 num_layers: int = 2, num_heads: int = 2, vocab_size: int = 512,
                 target_layer: str = DEFAULT_LAYER, batch_size: int = 8, upsample: str = "bicubic_clip",
                 device: str = "cpu"):
        from transformers import CLIPModel

        VitCamModel.__init__(self, device)
        self.upsample = check_upsample(upsample)
        config = tiny_clip_config(vocab_size, image_size, patch_size, hidden_size, num_layers, num_heads)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = CLIPModel(config)
        tokenizer = HashWordTokenizer(vocab_size, config.text_config.max_position_embeddings)
        self._setup(model, tokenizer, CLIP_MEAN, CLIP_STD, target_layer, batch_size)
