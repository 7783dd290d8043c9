"""Batching helpers for counters that encode an image once and decode many prompts.

``Counter.decode`` receives one feature object per pair; the negative-label test passes the same object for every
prompt of an image. :func:`group_by_image` recovers those groups (by object identity) so a counter runs its
prompt-conditioned head once per image over all of its prompts, and :class:`EmbeddingCache` keeps the text
embedding of each distinct prompt so that prompts shared by many images are encoded once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch


def group_by_image(features: Sequence[Any]) -> list[tuple[Any, list[int]]]:
    """Pair indices grouped by feature object, in order of first appearance.

    Example:
        >>> a, b = object(), object()
        >>> [idx for _, idx in group_by_image([a, b, a])]
        [[0, 2], [1]]
    """
    groups: dict[int, tuple[Any, list[int]]] = {}
    for i, f in enumerate(features):
        groups.setdefault(id(f), (f, []))[1].append(i)
    return list(groups.values())


def pooled_text_features(text_model: Any, tokenizer: Any, texts: Sequence[str], max_length: int, device: str,
                         padding: bool | str = True) -> torch.Tensor:
    """``(len(texts), D)`` pooled features of ``text_model.get_text_features`` (a CLIP-style text tower).

    Args:
        text_model: Module with ``get_text_features(input_ids=..., attention_mask=...)``.
        tokenizer: The model's tokenizer; texts are truncated to ``max_length`` tokens.
        texts: The texts, already formatted.
        max_length: Longest token sequence (the text tower's position embeddings).
        device: Where the tokens go.
        padding: ``True`` (to the longest text) or ``"max_length"``.
    """
    tok = tokenizer(list(texts), padding=padding, truncation=True, max_length=max_length,
                    return_tensors="pt").to(device)
    return text_model.get_text_features(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"]).pooler_output


class EmbeddingCache:
    """Least-recently-used cache of one embedding tensor per prompt string.

    Args:
        encode: Maps a list of distinct prompts to a ``(len(prompts), D)`` tensor in one batch.
        max_size: Most prompts kept.

    Example:
        >>> cache = EmbeddingCache(lambda ps: torch.tensor([[float(len(p))] for p in ps]))
        >>> cache(["ab", "abc", "ab"]).squeeze(1).tolist()
        [2.0, 3.0, 2.0]
    """

    def __init__(self, encode: Callable[[list[str]], torch.Tensor], max_size: int = 4096):
        self._encode = encode
        self._max_size = max_size
        self._store: OrderedDict[str, torch.Tensor] = OrderedDict()

    def __call__(self, prompts: Sequence[str]) -> torch.Tensor:
        """``(len(prompts), D)`` embeddings; prompts not seen before are encoded together in one batch."""
        missing = list(dict.fromkeys(p for p in prompts if p not in self._store))
        if missing:
            for p, e in zip(missing, self._encode(missing), strict=True):
                self._store[p] = e
        for p in prompts:
            self._store.move_to_end(p)
        out = torch.stack([self._store[p] for p in prompts])
        while len(self._store) > self._max_size:
            self._store.popitem(last=False)
        return out

    def clear(self) -> None:
        self._store.clear()
