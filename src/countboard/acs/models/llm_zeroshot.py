"""A chat causal LM as a zero-shot text classifier (the BCC study's LL3: Llama-3.2-3B prompted for the sentiment).

``LlmZeroShotClassifier`` asks the model ``template`` (``{text}`` the story, ``{labels}`` the labels, comma
separated) through the shared adapter (``countboard.models.asked.AskedModel``, text-only: chat template, greedy,
left padding, one ``generate`` per batch) and reads its label with ``parse_label``: the answer lower-cased, the
label words (the attribute's labels and the keys of ``label_map``) found as whole words; exactly one distinct label
found is the answer's label; none, or two different ones ("positive or negative"), leave the raw answer, which
``label_map`` does not map, so the text is a failed output with the raw answer in its ``failure`` (counted apart
in ``acs_failure_rate``, never guessed). The study does not publish its LL3 prompt: ``DEFAULT_TEMPLATE`` is this
project's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from countboard.acs.datasets.text_prompts import SENTIMENT_LABELS
from countboard.errors import ConfigError
from countboard.models.base import RawPrediction, TextClassifier

DEFAULT_TEMPLATE = ("Classify the sentiment of the following story as {labels}. Answer with one word.\n\n"
                    "Story: {text}")


def parse_label(answer: str, words: Sequence[str]) -> str:
    """The one label word ``answer`` names (lower-cased), else the raw answer stripped.

    Example:
        >>> parse_label("Sentiment: Positive.", ["positive", "neutral", "negative"])
        'positive'
        >>> parse_label("positive or negative", ["positive", "negative"])
        'positive or negative'
    """
    text = str(answer).lower()
    found = {w for w in words if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)}
    return found.pop() if len(found) == 1 else str(answer).strip()


NO_MODEL_ID = ("task.classifier.model_id is not set: give a chat causal LM's hub id or local folder, or pick a "
               "preset (task/classifier=llama3_2_3b_instruct)")


class LlmZeroShotClassifier(TextClassifier):
    """Any chat causal LM asked for the label of each text (module docstring).

    Args:
        model_id: Hub id or local directory of a causal LM (with a chat template, or ``prompt=plain``).
        template: The question; ``{text}`` and ``{labels}`` are filled in.
        labels, label_map, name, batch_size: As every ``TextClassifier``.
        max_new_tokens: Longest answer, in tokens.
        system_prompt: An optional system message.
        prompt: ``auto`` / ``chat`` / ``plain``, as ``AskedModel``.
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        revision: Hub revision.
    """

    def __init__(self, model_id: str | None = None, template: str = DEFAULT_TEMPLATE, name: str = "llm_zeroshot",
                 labels: Sequence[str] = SENTIMENT_LABELS, label_map: Mapping[str, str] | None = None,
                 max_new_tokens: int = 8, system_prompt: str | None = None, prompt: str = "auto",
                 dtype: str = "auto", revision: str | None = None, batch_size: int = 16):
        super().__init__(name, labels, label_map, batch_size)
        if not model_id:
            raise ConfigError(NO_MODEL_ID)
        if "{text}" not in template:
            raise ConfigError(f"task.classifier.template has no {{text}}: write where the text goes, e.g. "
                              f"{DEFAULT_TEMPLATE!r}")
        self.model_id, self.template, self.revision = str(model_id), template, revision
        self.settings = {"max_new_tokens": int(max_new_tokens), "system_prompt": system_prompt, "prompt": prompt,
                         "dtype": dtype}
        self._asked = None

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        """Before any run exists: a ``model_id`` is set and its checkpoint can be loaded (``check_node_weights``)."""
        from countboard.models.hf_loading import check_node_weights

        if not node.get("model_id"):
            raise ConfigError(NO_MODEL_ID)
        check_node_weights(node)

    def load(self, device: str = "cpu") -> None:
        if self._asked is not None and device == self.device:
            return
        from countboard.models.asked import AskedModel

        super().load(device)
        self._asked = AskedModel(self.model_id, device=device, images=False, revision=self.revision,
                                 **self.settings)

    def predict_raw(self, texts: Sequence[str]) -> list[RawPrediction]:
        self.load(self.device)
        words = list(dict.fromkeys([*self.labels, *self.label_map]))
        questions = [self.template.format(text=t, labels=", ".join(self.labels)) for t in texts]
        return [(parse_label(a, words), None, None) for a in self._asked.ask(None, questions)]
