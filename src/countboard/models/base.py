"""Every model interface, in one place: counters, generators, explainers, text generators, text classifiers.

Backends live in the domain packages (``countboard.counting.models``, ``numeracy.models``, ``grounding.models``,
``acs.models``) and implement one of these classes; tasks call only what is declared here. The items they take and
return are in ``countboard.items``; nothing here knows a domain.

Counters map (image, prompt) pairs to density maps whose sum is the count. A counter that can encode an image once
and decode many prompts overrides ``encode_images`` and ``decode``; tasks that prompt one image with many classes
(the negative-label test) call ``encode_images`` once per image and ``decode`` with all prompts of that image.
Tasks that need counts only call ``decode_counts``, which counters implement without maps at image resolution;
tasks that need sums over parts of the maps call ``reduce_maps``, which reduces each map where
``device_density`` made it and reads the results of a batch at once.
"""

from __future__ import annotations

import hashlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from countboard.errors import ConfigError
from countboard.items import (
    GeneratedImage,
    GeneratedText,
    GroundingSample,
    ImageItem,
    ImagePrompt,
    TextPrompt,
)
from countboard.models.hf_loading import check_node_weights

log = logging.getLogger("countboard")


class Counter(ABC):
    """Prompt-based class-agnostic counter.

    Subclasses implement ``decode``; those with an expensive image encoder also override ``encode_images`` so its
    output is reused across prompts.
    """

    kind = "counter"
    #: True when ``encode_images`` does real work worth caching (image backbone features).
    caches_image_features: bool = False
    #: False for a counter whose maps do not say where the objects are (a model that answers one number): tasks
    #: that read parts of the maps refuse it (``localises(node)``).
    localising: bool = True

    @classmethod
    def localises(cls, node: Mapping[str, Any]) -> bool:
        """Whether the counter configured by ``node`` makes maps that locate objects (read before it is built)."""
        return cls.localising

    def __init__(self, device: str = "cpu"):
        self.device = device

    def encode_images(self, items: Sequence[ImageItem]) -> list[Any]:
        """Per-image features to reuse across prompts; the default keeps the items themselves."""
        return list(items)

    @abstractmethod
    def decode(self, features: Sequence[Any], prompts: Sequence[str]) -> list[np.ndarray]:
        """Density maps for pairs ``(features[i], prompts[i])``: each ``(H, W)`` float32 at image resolution."""

    def decode_counts(self, features: Sequence[Any], prompts: Sequence[str]) -> np.ndarray:
        """Counts of the pairs ``(features[i], prompts[i])``: ``map_count`` of what ``decode`` returns.

        Counters override it to count without building maps at image resolution (one transfer from the device
        for the whole batch); the counts must equal ``map_count`` of the maps.
        """
        return np.array([map_count(m) for m in self.decode(features, prompts)], dtype=np.float64)

    def decode_counts_later(self, features: Sequence[Any], prompts: Sequence[str]) -> Callable[[], np.ndarray]:
        """``decode_counts`` split in two: the call queues the pairs' work on the device, and the function it
        returns reads the counts. A task queues the next batch before it reads this one, so that the device is
        not idle while the host builds records. By default the counts are computed at once."""
        counts = self.decode_counts(features, prompts)
        return lambda: counts

    def density(self, items: Sequence[ImageItem], prompts: Sequence[str]) -> list[np.ndarray]:
        """Density maps of ``items[i]`` prompted with ``prompts[i]`` (encode then decode)."""
        check_one_prompt_each(items, prompts)
        return self.decode(self.encode_images(items), prompts)

    def count(self, items: Sequence[ImageItem], prompts: Sequence[str]) -> np.ndarray:
        """Counts of ``items[i]`` prompted with ``prompts[i]`` (encode then ``decode_counts``)."""
        check_one_prompt_each(items, prompts)
        return self.decode_counts(self.encode_images(items), prompts)

    def device_density(self, items: Sequence[ImageItem], prompts: Sequence[str]) -> list[Any]:
        """``density``'s maps as ``torch`` tensors, left where the counter makes them (its device).

        A counter that can make ``decode``'s maps on its device defines ``device_maps(features, prompts)`` (equal to
        ``density``'s maps up to float rounding); it is used off the CPU. On the CPU, where the host is the device,
        and for the other counters, the maps are ``density``'s own.
        """
        import torch

        device_maps = getattr(self, "device_maps", None)
        if device_maps is not None and torch.device(self.device).type != "cpu":
            check_one_prompt_each(items, prompts)
            return device_maps(self.encode_images(items), prompts)
        return [torch.from_numpy(np.asarray(m)) for m in self.density(items, prompts)]

    def reduce_maps(self, items: Sequence[ImageItem], prompts: Sequence[str],
                    reduce: Callable[[int, Any], Sequence[Any]]) -> list[list[np.ndarray]]:
        """``reduce(i, map)`` of the density map of ``items[i]`` prompted with ``prompts[i]``, computed where the
        map is (``device_density``); the results of the whole batch are read in one transfer.

        ``reduce`` returns tensors on the map's device (sums over parts of the map, or the map itself when the
        host needs it); what comes back is, per pair, those tensors as numpy arrays. No other part of a map leaves
        the device.
        """
        check_one_prompt_each(items, prompts)
        return read_reductions(self.device_density(items, prompts), reduce)

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        """Check, before any run exists, that what the model needs (code, weights, packages) is there; raise a
        ``CountboardError`` naming what is missing and where to get it. ``node``: the model's config. By default:
        the checkpoint of ``model_id``, where the node has one (``hf_loading.check_node_weights``)."""
        check_node_weights(node)

    def run_tags(self) -> dict[str, str]:
        """Tags the run records about the model once it is built (e.g. the revision of external code)."""
        return {}


def preflight_node(node: Mapping[str, Any] | None, key: str) -> None:
    """The own check (``preflight``) of the class that a task's nested config node builds (its evaluator, VLM or
    classifier), before any run exists, its messages naming ``key`` (``task.evaluator``). A task calls it for the
    nodes its settings use (an unused VLM preset is not checked). A node without a known class passes: building it
    reports that."""
    from hydra.utils import get_class

    from countboard.models.hf_loading import node_key

    if not node or not node.get("_target_"):
        return
    try:
        cls = get_class(str(node["_target_"]))
    except Exception:
        return
    check = getattr(cls, "preflight", None)
    if check is not None:
        with node_key(key):
            check(dict(node))


def read_reductions(maps: Sequence[Any], reduce: Callable[[int, Any], Sequence[Any]],
                    first: Sequence[Any] = ()) -> list[list[np.ndarray]]:
    """``reduce(i, maps[i])`` of every map, read with ``first`` (tensors read before them) in one transfer
    (``models/transfer.py``): ``[first as arrays, reduce(0, maps[0]) as arrays, ...]`` when ``first`` is given,
    else the per-map lists alone."""
    from countboard.models.transfer import split_parts, to_host

    parts = [list(first), *(list(reduce(i, m)) for i, m in enumerate(maps))]
    out = split_parts(to_host([t for part in parts for t in part]), [len(part) for part in parts])
    return out if first else out[1:]


class CountedMap(np.ndarray):
    """A density map whose count is not its sum (a detector's thresholded count): ``map_count`` reads ``count``."""

    count: float

    def __new__(cls, density: np.ndarray, count: float) -> CountedMap:
        out = np.asarray(density).view(cls)
        out.count = float(count)
        return out

    def __array_finalize__(self, obj: Any) -> None:
        self.count = getattr(obj, "count", float("nan"))


class AnsweredCounts(np.ndarray):
    """Counts read from answers in words (``decode_counts`` of a model asked in words): the raw ``answers``, and
    per pair the ``errors`` of those that state no count (their count is NaN, never 0).

    Example:
        >>> c = AnsweredCounts([3.0, float("nan")], ["3", "no idea"], [None, "the answer declines to count"])
        >>> answer_fields(c, 0, 2), unparsed(c, 0, 2)
        ({'answers': ['3', 'no idea']}, "unparsable answer 'no idea' (the answer declines to count)")
    """

    answers: list[str]
    errors: list[str | None]

    def __new__(cls, counts: Sequence[float], answers: Sequence[str], errors: Sequence[str | None]
                ) -> AnsweredCounts:
        out = np.asarray(counts, dtype=np.float64).view(cls)
        out.answers, out.errors = [str(a) for a in answers], list(errors)
        return out

    def __array_finalize__(self, obj: Any) -> None:
        self.answers = getattr(obj, "answers", [])
        self.errors = getattr(obj, "errors", [])


def answer_fields(counts: Any, start: int, stop: int) -> dict[str, list[str]]:
    """``{"answers": [...]}`` of pairs ``start:stop`` when ``counts`` came from answers in words, else ``{}``:
    what a task adds to a record so that the raw answers sit next to the parsed counts."""
    answers = getattr(counts, "answers", None)
    return {"answers": list(answers[start:stop])} if answers else {}


def unparsed(counts: Any, start: int, stop: int) -> str | None:
    """Why pairs ``start:stop`` have no count (the first unparsable answer, quoted), or None: such a unit fails
    with this message, which keeps the raw answer."""
    errors = getattr(counts, "errors", None) or []
    for k, err in enumerate(errors[start:stop]):
        if err:
            return f"unparsable answer {counts.answers[start + k]!r} ({err})"
    return None


def map_count(density: np.ndarray) -> float:
    """The count of a density map: its ``count`` when it is a ``CountedMap``, else its sum.

    Example:
        >>> map_count(np.ones((2, 2))), map_count(CountedMap(np.ones((2, 2)), 3.0))
        (4.0, 3.0)
    """
    if isinstance(density, CountedMap):
        return float(density.count)
    return float(np.asarray(density).sum())


def check_one_prompt_each(features: Sequence[Any], prompts: Sequence[str], what: str = "images",
                          per: str = "image") -> None:
    """``ValueError`` unless ``prompts`` holds one prompt per entry of ``features`` (named ``what`` in the message).

    Example:
        >>> check_one_prompt_each([1, 2], ["cats"])
        Traceback (most recent call last):
        ...
        ValueError: 2 images but 1 prompts: pass one prompt per image
    """
    if len(features) != len(prompts):
        raise ValueError(f"{len(features)} {what} but {len(prompts)} prompts: pass one prompt per {per}")


def boxes_to_density(boxes: np.ndarray, scores: np.ndarray | None, size: tuple[int, int]) -> np.ndarray:
    """Density map with unit mass at each box centre (detect-then-count models).

    Args:
        boxes: ``(K, 4)`` boxes ``(y0, x0, y1, x1)`` in pixels.
        scores: Optional ``(K,)`` weights (defaults to 1 each).
        size: ``(H, W)`` of the map.

    Example:
        >>> float(boxes_to_density(np.array([[0, 0, 4, 4]]), None, (8, 8)).sum())
        1.0
    """
    h, w = size
    out = np.zeros((h, w), dtype=np.float32)
    if len(boxes) == 0:
        return out
    boxes = np.asarray(boxes, dtype=np.float64)
    cy = np.clip(((boxes[:, 0] + boxes[:, 2]) / 2).astype(int), 0, h - 1)
    cx = np.clip(((boxes[:, 1] + boxes[:, 3]) / 2).astype(int), 0, w - 1)
    weights = np.ones(len(boxes)) if scores is None else np.asarray(scores, dtype=np.float64)
    np.add.at(out, (cy, cx), weights.astype(np.float32))
    return out


class Generator(ABC):
    """Base class of text-to-image generators."""

    kind = "generator"

    def __init__(self, device: str = "cpu", batch_size: int = 4):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.device = device
        self.batch_size = int(batch_size)

    @abstractmethod
    def generate_batch(self, prompts: Sequence[ImagePrompt], seeds: Sequence[int]) -> list[GeneratedImage]:
        """Images for the pairs ``(prompts[i], seeds[i])``; the same pair always gives the same image."""

    def available_seeds(self) -> list[int] | None:
        """The seeds a generator that reads its images (a released set) has images of; None for one that makes
        them for any seed (tasks then use their own seeds)."""
        return None

    def generate(self, prompts: Sequence[ImagePrompt], seeds: Sequence[int]) -> Iterator[GeneratedImage]:
        """Images for every prompt × seed (prompt-major order), ``batch_size`` pairs per call of the backend."""
        pairs = [(p, int(s)) for p in prompts for s in seeds]
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            yield from self.generate_batch([p for p, _ in chunk], [s for _, s in chunk])


class GroundingModel(ABC):
    """Maps (image, phrase) samples to activation maps over the image.

    ``explainer_method`` names how the maps are made (logged as a run tag so the leaderboard can show it) and
    ``explainer_detail()`` the settings a reader needs to compare rows (layer, backbone, upsampling).
    """

    kind = "vlm"
    explainer_method = "unspecified"
    #: False for a model that reads only a sample's box and declared size, never its pixels: tasks then do not
    #: decode its samples' images.
    reads_pixels: bool = True

    def __init__(self, device: str = "cpu"):
        self.device = device

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        """As ``Counter.preflight``: by default the checkpoint of ``model_id``, before any run exists."""
        check_node_weights(node)

    def explainer_detail(self) -> str:
        """Short human-readable settings of the explainer (empty when there is nothing to add)."""
        return ""

    @abstractmethod
    def heatmaps(self, samples: Sequence[GroundingSample]) -> list[np.ndarray]:
        """One ``(H, W)`` float map per sample, at the sample image's resolution."""


def stable_seed(*parts: object) -> int:
    """A 32-bit seed from the text of ``parts`` (the same in every process, unlike ``hash``).

    Example:
        >>> stable_seed(0, "a", "b") == stable_seed(0, "a", "b") != stable_seed(1, "a", "b")
        True
    """
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")


class TextGenerator(ABC):
    """Base class of text generators.

    ``knows_truth`` is True for generators whose ``GeneratedText.true_label`` is set (simulated human labels need
    it).
    """

    kind = "text_generator"
    knows_truth = False

    def __init__(self, device: str = "cpu", batch_size: int = 8, seed: int = 0):
        if int(batch_size) < 1:
            raise ConfigError(f"model.batch_size must be >= 1, got {batch_size}")
        self.device = device
        self.batch_size = int(batch_size)
        self.seed = int(seed)

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        """As ``Counter.preflight``: by default the checkpoint of ``model_id``, before any run exists."""
        check_node_weights(node)

    @abstractmethod
    def generate_batch(self, prompts: Sequence[TextPrompt]) -> list[GeneratedText]:
        """One text per prompt, in order; the same prompts in the same batch give the same texts."""

    def generate(self, prompts: Sequence[TextPrompt]) -> Iterator[GeneratedText]:
        """Texts for every prompt, ``batch_size`` prompts per call of ``generate_batch``."""
        for start in range(0, len(prompts), self.batch_size):
            yield from self.generate_batch(prompts[start:start + self.batch_size])


RawPrediction = tuple[str, dict[str, float] | None, float | None]


@dataclass
class Classification:
    """One classifier decision.

    Attributes:
        label: The attribute label (None when the item could not be classified).
        raw_label: The backend's own label.
        score: The backend's scalar score (VADER compound, TextBlob polarity, top probability…), if any.
        scores: Score per attribute label, if the backend has them.
        error: What went wrong, for items without a label.
    """

    label: str | None
    raw_label: str = ""
    score: float | None = None
    scores: dict[str, float] | None = None
    error: str | None = None


class TextClassifier(ABC):
    """Base class: empty-text handling, label mapping and batching around ``predict_raw``.

    Args:
        name: Short name (shown in run tags as ``classifier=<name>``).
        labels: The attribute's labels.
        label_map: Raw label → attribute label (case-insensitive).
        batch_size: Texts per backend call.
    """

    def __init__(self, name: str = "", labels: Sequence[str] = (),
                 label_map: Mapping[str, str] | None = None, batch_size: int = 32):
        self.name = name or type(self).__name__
        self.labels = tuple(str(x).lower() for x in labels)
        if not self.labels:
            raise ConfigError(f"classifier {self.name}: give the labels of the attribute it classifies")
        self.label_map = {str(k).lower(): str(v).lower() for k, v in (label_map or {}).items()}
        bad = sorted({v for v in self.label_map.values() if v not in self.labels})
        if bad:
            raise ConfigError(f"classifier {self.name}: label_map targets {bad} are not labels of the attribute "
                              f"{list(self.labels)}")
        if int(batch_size) < 1:
            raise ConfigError(f"classifier {self.name}: batch_size must be at least 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.device = "cpu"

    def load(self, device: str = "cpu") -> None:
        """Load the backend on ``device`` (no-op for lexicons; models load once)."""
        self.device = device

    @abstractmethod
    def predict_raw(self, texts: Sequence[str]) -> list[RawPrediction]:
        """``(raw_label, raw_scores or None, scalar score or None)`` per non-empty text."""

    def map_label(self, raw: str) -> str | None:
        key = str(raw).lower()
        if key in self.label_map:
            return self.label_map[key]
        return key if key in self.labels else None

    def classify(self, texts: Sequence[str]) -> list[Classification]:
        """One ``Classification`` per text, in order."""
        out: list[Classification | None] = [None] * len(texts)
        todo = []
        for i, t in enumerate(texts):
            if t is None or not str(t).strip():
                out[i] = Classification(None, error="empty text: nothing to classify")
            else:
                todo.append(i)
        for start in range(0, len(todo), self.batch_size):
            idx = todo[start:start + self.batch_size]
            for i, (raw, raw_scores, score) in zip(idx, self.predict_raw([str(texts[i]) for i in idx]), strict=True):
                out[i] = self._mapped(raw, raw_scores, score)
        return out

    def _mapped(self, raw: str, raw_scores: dict[str, float] | None, score: float | None) -> Classification:
        label = self.map_label(raw)
        scores = None
        if raw_scores is not None:
            scores = dict.fromkeys(self.labels, 0.0)
            for k, v in raw_scores.items():
                target = self.map_label(k)
                if target is not None:
                    scores[target] += float(v)
        if label is None:
            return Classification(None, str(raw), score, scores,
                                  error=f"classifier {self.name} answered {raw!r}, which label_map does not map to "
                                        f"one of {list(self.labels)}; add it to label_map")
        return Classification(label, str(raw), score, scores)
