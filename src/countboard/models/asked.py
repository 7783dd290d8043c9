"""A model asked in words: any transformers image-text-to-text model (a VLM), or a chat causal LM without images.

``AskedModel.ask(images, questions)`` answers the pairs ``(images[i], questions[i])`` greedily, in one left-padded
``generate`` call, and returns the raw answers (what the model wrote after the prompt, special tokens left out).
What a domain asks and how it reads the answer is the domain's (``countboard.models.answers`` parses counts).

- Prompts go through the processor's (or tokenizer's) chat template when it has one (``prompt="auto"``), else they
  are ``prompt_prefix + question`` with the image token in front where the processor has one (PaliGemma-style
  models: ``prompt=plain``, ``prompt_prefix="answer en "``).
- Each image is encoded once for all of its questions in the batch (``reuse_image_features``): its vision features
  are computed once and handed to ``generate`` for every question (``mm_encoder_outputs``) where the architecture
  takes precomputed features (LLaVA, PaliGemma, Idefics3 and most ``transformers`` VLMs); elsewhere each pair's
  image goes through the vision tower with its question. Both give the same answers
  (``tests/models/test_asked.py``).
- ``images=False`` loads ``AutoTokenizer`` + ``AutoModelForCausalLM``: the same adapter for a text-only chat LM.
- Weights load with ``dtype`` (``auto``: the checkpoint's) on ``device``; the job's ``precision`` autocast applies
  around the calls as for every other model (``models/precision.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from countboard.decode import to_pil
from countboard.errors import ConfigError
from countboard.models.hf_loading import load_pretrained

PROMPTS = ("auto", "chat", "plain")
#: The model families whose processors need ``torchvision`` (their video processors), and the extra to install.
NEEDS_TORCHVISION = ("qwen2_5_vl", "qwen2_vl", "smolvlm", "qwen3_vl")
TORCHVISION_EXTRA = "pip install 'countboard[vlm-video]'"


def _dtype(name: str):
    import torch

    choices = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in choices:
        raise ConfigError(f"model.dtype must be one of {list(choices)}, got {name!r}")
    return choices[name]


class AskedModel:
    """Load a model asked in words and answer batches of questions (module docstring).

    Args:
        model_id: Hub id or local directory.
        device: ``"cpu"`` or ``"cuda"``.
        images: True for an image-text-to-text model, False for a text-only causal LM.
        max_new_tokens: Longest answer, in tokens.
        prompt: ``auto`` (the chat template when there is one), ``chat`` (required) or ``plain``.
        prompt_prefix: Text put before each question in a plain prompt (``"answer en "`` for PaliGemma).
        system_prompt: A system message for chat prompts.
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        reuse_image_features: Encode each image once for all its questions of a batch, where the model allows.
        trust_remote_code: Let transformers run the checkpoint's own code (Molmo).
        revision: Hub revision.
    """

    def __init__(self, model_id: str, device: str = "cpu", images: bool = True, max_new_tokens: int = 16,
                 prompt: str = "auto", prompt_prefix: str = "", system_prompt: str | None = None,
                 dtype: str = "auto", reuse_image_features: bool = True, trust_remote_code: bool = False,
                 revision: str | None = None):
        if prompt not in PROMPTS:
            raise ConfigError(f"model.prompt={prompt!r}: use one of {', '.join(PROMPTS)}")
        if int(max_new_tokens) < 1:
            raise ConfigError(f"model.max_new_tokens must be at least 1, got {max_new_tokens}")
        self.model_id, self.device, self.images = str(model_id), device, bool(images)
        self.max_new_tokens = int(max_new_tokens)
        self.prompt_prefix, self.system_prompt = str(prompt_prefix or ""), system_prompt
        kwargs = {"trust_remote_code": bool(trust_remote_code), "revision": revision}
        if self.images:
            from transformers import AutoModelForImageTextToText, AutoProcessor

            self.processor = load_pretrained(_Loader(AutoProcessor, kwargs), self.model_id, "processor")
            self.tokenizer = self.processor.tokenizer
            self.model = load_pretrained(_Loader(AutoModelForImageTextToText, {**kwargs, "dtype": _dtype(dtype)}),
                                         self.model_id, "image-text-to-text model")
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.processor = self.tokenizer = load_pretrained(_Loader(AutoTokenizer, kwargs), self.model_id,
                                                              "tokenizer")
            self.model = load_pretrained(_Loader(AutoModelForCausalLM, {**kwargs, "dtype": _dtype(dtype)}),
                                         self.model_id, "causal LM")
        self.model.to(device).eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        has_template = bool(getattr(self.processor, "chat_template", None))
        if prompt == "chat" and not has_template:
            raise ConfigError(f"model.prompt=chat but {self.model_id!r} has no chat template; use model.prompt=plain")
        self.use_chat = has_template if prompt == "auto" else prompt == "chat"
        supports = getattr(self.model, "_supports_mm_encoder_outputs", lambda: False)
        self.encoder = getattr(self.model.base_model, "get_image_features", None) if self.images else None
        self.reuse = bool(reuse_image_features) and self.encoder is not None and bool(supports())

    @classmethod
    def preflight(cls, model_id: str, trust_remote_code: bool = False) -> None:
        """A one-line ``ConfigError`` when the checkpoint's processor needs ``torchvision`` and it is missing
        (read from a local folder's ``config.json``; hub ids are named by family in ``NEEDS_TORCHVISION``)."""
        import importlib.util
        import json
        from pathlib import Path

        if importlib.util.find_spec("torchvision") is not None:
            return
        family = str(model_id).lower()
        config = Path(str(model_id)) / "config.json"
        if config.is_file():
            try:
                family = str(json.loads(config.read_text()).get("model_type", ""))
            except (OSError, ValueError):
                return
        needs = [f for f in NEEDS_TORCHVISION if f in family.replace("-", "_").replace(".", "_")]
        if needs:
            raise ConfigError(f"{model_id!r}: the {needs[0]} processor needs torchvision, which is not installed; "
                              f"install it ({TORCHVISION_EXTRA}, or torchvision matching your torch build)")

    def format(self, question: str) -> str:
        """The prompt the model sees for ``question``."""
        if self.use_chat:
            messages = [{"role": "system", "content": [{"type": "text", "text": self.system_prompt}]}] \
                if self.system_prompt and self.images else \
                ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else [])
            content = ([{"type": "image"}, {"type": "text", "text": question}] if self.images else question)
            messages.append({"role": "user", "content": content})
            return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        token = getattr(self.processor, "image_token", "") if self.images else ""
        return f"{token or ''}{self.prompt_prefix}{question}"

    def ask(self, images: Sequence[Any] | None, questions: Sequence[str]) -> list[str]:
        """Greedy answers to ``questions[i]`` about ``images[i]`` (``images=None`` for a text-only model); pairs
        that share an image object share its encoding."""
        import torch

        if self.images and (images is None or len(images) != len(questions)):
            raise ValueError(f"{len(questions)} questions but {0 if images is None else len(images)} images: "
                             "pass one image per question")
        if not questions:
            return []
        texts = [self.format(q) for q in questions]
        if self.images:
            enc = self.processor(text=texts, images=[[_rgb(im)] for im in images], return_tensors="pt",
                                 padding=True, add_special_tokens=not self.use_chat)
        else:
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not self.use_chat)
        enc = {k: (v.to(self.device, self.model.dtype) if torch.is_floating_point(v) else v.to(self.device))
               for k, v in enc.items() if isinstance(v, torch.Tensor)}
        with torch.inference_mode():
            if self.reuse:
                enc = self._with_features(enc, images)
            out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False,
                                      pad_token_id=self.tokenizer.pad_token_id)
        new = out[:, enc["input_ids"].shape[1]:]
        return [t.strip() for t in self.tokenizer.batch_decode(new, skip_special_tokens=True)]

    def _with_features(self, enc: dict[str, Any], images: Sequence[Any]) -> dict[str, Any]:
        """``enc`` with the image inputs replaced by their vision features, computed once per distinct image."""
        import torch
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        keys = [k for k in inspect.signature(self.encoder).parameters if k in enc]
        first: dict[int, int] = {}
        owner = [first.setdefault(id(im), i) for i, im in enumerate(images)]
        firsts = sorted(set(owner))
        pooled_all = self.encoder(**{k: enc[k][firsts] for k in keys}, return_dict=True).pooler_output
        if len(pooled_all) == len(firsts):  # one entry per image (LLaVA's list, PaliGemma's batch): split it
            feats = {i: pooled_all[j:j + 1] for j, i in enumerate(firsts)}
        else:  # entries per crop (Idefics3's image splitting): one image at a time
            feats = {i: self.encoder(**{k: enc[k][i:i + 1] for k in keys}, return_dict=True).pooler_output
                     for i in firsts}
        per_pair = [feats[o] for o in owner]
        if isinstance(per_pair[0], torch.Tensor):
            pooled: Any = torch.cat(per_pair, dim=0)
        else:
            pooled = [t for f in per_pair for t in f]
        rest = {k: v for k, v in enc.items() if k not in keys}
        return {**rest, "mm_encoder_outputs": {"image": BaseModelOutputWithPooling(pooler_output=pooled)}}


class _Loader:
    """``cls.from_pretrained(model_id, **kwargs)`` behind the one-argument loader ``load_pretrained`` calls."""

    def __init__(self, cls: Any, kwargs: dict[str, Any]):
        self.cls, self.kwargs = cls, {k: v for k, v in kwargs.items() if v is not None}

    def from_pretrained(self, model_id: str) -> Any:
        return self.cls.from_pretrained(model_id, **self.kwargs)


def _rgb(image: Any) -> Any:
    """A PIL image in RGB (an ``(H, W, 3)`` array is converted)."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return to_pil(image)
    import numpy as np

    return Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")
