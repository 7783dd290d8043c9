"""How a batch of images reaches a counter's device: one mechanism for every transformers counter.

A counter says what its model computes (``encode`` of a list of images into stacked tensors, a head over stacked
pairs) and how its outputs become counts and maps; this module says how the work is cut and fed:

- **Encoder calls sized by the device** (:func:`images_per_call`): ``image_batch_size: auto`` encodes the whole
  outer batch in one call on CUDA (the outer batch is itself sized by ``batch_size``, or measured with
  ``batch_size=auto``: ``countboard.batching``), and on the CPU as many images as half the memory available holds
  at the counter's estimate of an image's activations. A number fixes the images per call.
- **Features kept stacked** (:class:`EncodedImages`): one encoder call's outputs stay one tensor per output, the
  images along dimension 0; each image is an :class:`ImageRef` (the object ``Counter.decode`` receives per pair).
- **Every per-pair step over all pairs of a batch** (:func:`pair_rows`): the pairs' rows into the stacked features,
  so a counter's head, post-processing and selection run once per batch, not once per image.
- **No per-call overhead** (:func:`device_step`): counters compute under ``torch.no_grad`` rather than
  ``torch.inference_mode``: autocast keeps its cast cache only outside inference mode, so a ``bf16`` cell casts each
  weight once, not on every call.

Which images go through one call does not change a record: the encoders compute every image independently (row by
row in their matrix products), and ``image_batch_size`` is a feeding key (``config.MODEL_FEEDING_KEYS``), outside a
cell's identity.

Example:
    >>> import torch
    >>> batch = EncodedImages({"x": torch.arange(6.0).reshape(3, 2)}, [(4, 4), (5, 5), (6, 6)])
    >>> refs = batch.refs()
    >>> rows = pair_rows([refs[2], refs[0], refs[2]])
    >>> rows.tensor("x").tolist(), rows.rows.tolist(), rows.sizes
    ([[4.0, 5.0], [0.0, 1.0], [4.0, 5.0]], [2, 0, 2], [(6, 6), (4, 4), (6, 6)])
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from countboard.config import AUTO
from countboard.models.transfer import to_device

#: Share of the memory available to the process that one encoder call on the CPU may fill.
CPU_MEMORY_SHARE = 0.5


def images_per_call(setting: int | str, device: str, n_items: int, image_bytes: int) -> int:
    """Images per encoder call for a batch of ``n_items``.

    Args:
        setting: ``model.image_batch_size``: a positive number, or ``"auto"``.
        device: The counter's device.
        n_items: Images in the batch the task passes.
        image_bytes: The counter's estimate of one image's peak activations in an encoder call.

    Example:
        >>> images_per_call(2, "cpu", 64, 1), images_per_call("auto", "cuda", 64, 10**12)
        (2, 64)
        >>> images_per_call("auto", "cpu", 64, 1) == 64
        True
    """
    n = max(int(n_items), 1)
    if str(setting) != AUTO:
        return max(1, min(int(setting), n))
    if str(device).startswith("cuda"):
        return n
    from countboard.batching import available_ram

    return max(1, min(n, int(available_ram() * CPU_MEMORY_SHARE // max(int(image_bytes), 1))))


def vit_image_bytes(vision_config: Any, dtype_bytes: int = 4) -> int:
    """Peak activation bytes of one image in a ViT encoder call (a transformers vision config): a layer's live
    tensors (the residual stream, q/k/v, the attention output and the MLP's hidden layer) per token, plus the
    attention matrices where the attention is eager (the fused kernels do not hold them).

    Example:
        >>> from types import SimpleNamespace
        >>> vit_image_bytes(SimpleNamespace(image_size=32, patch_size=16, hidden_size=8, intermediate_size=16,
        ...                                 num_attention_heads=2, _attn_implementation="sdpa"))
        1280
    """
    side = int(vision_config.image_size) // int(vision_config.patch_size)
    tokens = side * side + 1
    per_token = 6 * int(vision_config.hidden_size) + int(vision_config.intermediate_size)
    attention = 0
    if getattr(vision_config, "_attn_implementation", "eager") in (None, "eager"):
        attention = int(vision_config.num_attention_heads) * tokens * tokens
    return (tokens * per_token + attention) * dtype_bytes


def check_setting(value: Any, key: str = "model.image_batch_size") -> int | str:
    """``value`` as an images-per-call setting: ``"auto"`` or a positive int; ``ConfigError`` otherwise."""
    from countboard.errors import ConfigError

    if str(value) == AUTO:
        return AUTO
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise ConfigError(f"{key} must be a positive number or auto, got {value!r}")
    return n


def device_step(fn: Callable) -> Callable:
    """Run ``fn`` under ``torch.no_grad()`` (see the module docstring: autocast's cast cache)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return wrapper


@dataclass(eq=False)
class EncodedImages:
    """What one encoder call produced: ``tensors`` with the images along dimension 0, and the images' sizes."""

    tensors: dict[str, torch.Tensor]
    sizes: list[tuple[int, int]]
    _refs: list[ImageRef] = field(default_factory=list, repr=False)

    def refs(self) -> list[ImageRef]:
        """One :class:`ImageRef` per image, in order (the same objects on every call)."""
        if not self._refs:
            self._refs = [ImageRef(self, k, tuple(s)) for k, s in enumerate(self.sizes)]
        return self._refs


@dataclass(eq=False)
class ImageRef:
    """One image of an :class:`EncodedImages`: its ``row`` there and its ``(H, W)`` ``size``."""

    batch: EncodedImages
    row: int
    size: tuple[int, int]

    def __getitem__(self, name: str) -> torch.Tensor:
        """This image's slice of the output ``name`` (its leading dimension kept: ``(1, ...)``)."""
        return self.batch.tensors[name][self.row:self.row + 1]


@dataclass
class PairRows:
    """The pairs of a decode call as rows into stacked features.

    Attributes:
        stacked: The features of every image the pairs name, one tensor per output (several encoder calls
            concatenated once).
        rows: ``(N,)`` long tensor on the features' device: pair ``i``'s row in ``stacked``.
        host_rows: The same rows as a list.
        sizes: Pair ``i``'s image size.
        images: The number of stacked images.
    """

    stacked: dict[str, torch.Tensor]
    rows: torch.Tensor
    host_rows: list[int]
    sizes: list[tuple[int, int]]
    images: int

    def tensor(self, name: str) -> torch.Tensor:
        """``stacked[name]`` at every pair's row: ``(N, ...)``."""
        return self.stacked[name].index_select(0, self.rows)


def pair_rows(features: Sequence[ImageRef]) -> PairRows:
    """The rows of ``features`` (one :class:`ImageRef` per pair) into their encoder calls' outputs, stacked."""
    batches: dict[int, tuple[EncodedImages, int]] = {}
    offset = 0
    for f in features:
        if id(f.batch) not in batches:
            batches[id(f.batch)] = (f.batch, offset)
            offset += len(f.batch.sizes)
    ordered = [b for b, _ in batches.values()]
    if len(ordered) == 1:
        stacked = dict(ordered[0].tensors)
    else:
        stacked = {k: torch.cat([b.tensors[k] for b in ordered]) for k in ordered[0].tensors}
    host = [batches[id(f.batch)][1] + f.row for f in features]
    device = next(iter(stacked.values())).device
    return PairRows(stacked, to_device(host, device, torch.long), host, [tuple(f.size) for f in features], offset)


def object_rows(features: Sequence[Any], tensors: Callable[[Any], dict[str, torch.Tensor]]) -> PairRows:
    """:func:`pair_rows` of per-image feature objects that each hold their own ``(1, ...)`` tensors (a counter
    whose encoder must run one image per call): ``tensors(f)`` of the distinct objects (by identity, in order of
    first appearance) stacked once as one :class:`EncodedImages`, each pair's row pointing at its object's.

    Example:
        >>> from types import SimpleNamespace
        >>> a = SimpleNamespace(x=torch.zeros(1, 2), size=(4, 4))
        >>> b = SimpleNamespace(x=torch.ones(1, 2), size=(5, 5))
        >>> rows = object_rows([b, a, b], lambda f: {"x": f.x})
        >>> rows.host_rows, rows.images, rows.tensor("x")[:, 0].tolist()
        ([0, 1, 0], 2, [1.0, 0.0, 1.0])
    """
    index: dict[int, int] = {}
    objects: list[Any] = []
    for f in features:
        if id(f) not in index:
            index[id(f)] = len(objects)
            objects.append(f)
    parts = [tensors(f) for f in objects]
    stacked = parts[0] if len(parts) == 1 else {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    refs = EncodedImages(stacked, [tuple(f.size) for f in objects]).refs()
    return pair_rows([refs[index[id(f)]] for f in features])


def element_calls(n_pairs: int, pair_elements: int, budget: int) -> Iterator[slice]:
    """Consecutive slices of ``n_pairs`` pairs, each at most ``budget`` elements of ``pair_elements`` each (at
    least one pair per call): how a counter's head over stacked pairs is cut to bound its memory.

    Example:
        >>> list(element_calls(5, 10, 25))
        [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    per_call = max(1, int(budget) // max(int(pair_elements), 1))
    for start in range(0, int(n_pairs), per_call):
        yield slice(start, min(start + per_call, int(n_pairs)))


def encode_in_calls(items: Sequence[Any], per_call: int,
                    encode: Callable[[Sequence[Any]], dict[str, torch.Tensor]]) -> list[ImageRef]:
    """``encode`` of consecutive runs of ``per_call`` items; one :class:`ImageRef` per item, in order."""
    out: list[ImageRef] = []
    for chunk in runs(items, per_call):
        out.extend(EncodedImages(encode(chunk), [tuple(it.size) for it in chunk]).refs())
    return out


def runs(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Consecutive runs of at most ``size`` items.

    Example:
        >>> [list(r) for r in runs([1, 2, 3], 2)]
        [[1, 2], [3]]
    """
    size = max(int(size), 1)
    for start in range(0, len(items), size):
        yield items[start:start + size]


def distinct(prompts: Sequence[str]) -> tuple[list[str], list[int]]:
    """The distinct prompts in order of first appearance, and each pair's index among them.

    Example:
        >>> distinct(["a", "b", "a"])
        (['a', 'b'], [0, 1, 0])
    """
    index: dict[str, int] = {}
    for p in prompts:
        index.setdefault(p, len(index))
    return list(index), [index[p] for p in prompts]
