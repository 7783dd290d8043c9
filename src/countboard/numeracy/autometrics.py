"""Auto-eval metrics of a generated image against its prompt, for GeckoNum's Table 3 (``geckonum_autometrics``).

A scorer has a ``key`` and ``score(images, specs) -> (n,)`` floats (higher: the image matches the prompt better).

* ``ClipScore``: CLIPScore (Hessel et al., 2021), ``w * max(cos(image, text), 0)`` with ``w = 2.5``, of any CLIP
  checkpoint (``model_id``; ViT-L/14 by default, as the GeckoNum authors' CLIP).
* ``CounterScore``: the share of the prompt's count questions (``PromptSpec.count_questions``) whose noun a counter
  counts to the asked number (1.0 when every number is depicted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from countboard.items import ImageItem
from countboard.numeracy.datasets.prompts import PromptSpec


class ClipScore:
    """CLIPScore of each image with its prompt text.

    Args:
        model_id: A CLIP checkpoint (hub id or folder) for ``CLIPModel`` / ``CLIPProcessor``.
        w: The rescaling weight of Hessel et al. (2.5).
        device: Where the model runs.
        local_files_only: Do not ask the hub.
    """

    key = "clipscore"

    def __init__(self, model_id: str = "openai/clip-vit-large-patch14", w: float = 2.5, device: str = "cpu",
                 local_files_only: bool = False):
        self.model_id, self.w, self.device, self.local_files_only = model_id, float(w), device, local_files_only
        self._model = self._processor = None

    def _load(self) -> None:
        if self._model is None:
            from transformers import CLIPModel, CLIPProcessor

            self._processor = CLIPProcessor.from_pretrained(self.model_id, local_files_only=self.local_files_only)
            self._model = CLIPModel.from_pretrained(self.model_id, local_files_only=self.local_files_only)
            self._model.to(self.device).eval()

    def score(self, images: Sequence[np.ndarray], specs: Sequence[PromptSpec]) -> np.ndarray:
        import torch

        self._load()
        inputs = self._processor(text=[s.prompt for s in specs], images=list(images), return_tensors="pt",
                                 padding=True, truncation=True)
        with torch.inference_mode():  # the forward's embeddings are projected and unit-normalised
            out = self._model(**{k: v.to(self.device) for k, v in inputs.items()})
            cos = (out.image_embeds * out.text_embeds).sum(dim=-1)
        return self.w * np.maximum(cos.float().cpu().numpy().astype(np.float64), 0.0)


class CounterScore:
    """The share of an image's count questions a counter answers with the asked number."""

    key = "counter"

    def __init__(self, counter: Any):
        self.counter = counter

    def score(self, images: Sequence[np.ndarray], specs: Sequence[PromptSpec]) -> np.ndarray:
        items, phrases, targets, owner = [], [], [], []
        for i, (image, spec) in enumerate(zip(images, specs, strict=True)):
            item = ImageItem(f"image{i}", image)
            for q in spec.count_questions():
                items.append(item)
                phrases.append(q.phrase)
                targets.append(q.target)
                owner.append(i)
        counts = np.asarray(self.counter.count(items, phrases), dtype=np.float64) if items else np.zeros(0)
        right = np.isfinite(counts) & (np.floor(np.nan_to_num(counts) + 0.5) == np.asarray(targets))
        total = np.bincount(owner, minlength=len(specs)).astype(np.float64)
        hits = np.bincount(owner, weights=right.astype(np.float64), minlength=len(specs))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, hits / np.maximum(total, 1), np.nan)
