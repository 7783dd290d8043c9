"""Procedural story generators with a known attribute control success, for offline BCC checks.

For each prompt the generator decides, with probability ``success[label]``, to write a story in the requested
label; otherwise the story takes another label, drawn with ``miss_weights`` (the BCC study saw neutral requests
drift to positive). The story is two to four sentences from the chosen label's word bank around the prompt's
title. The label actually written is returned as ``GeneratedText.true_label``, so the true success rate of a run
is known and simulated human labels can be drawn from it. Every choice is seeded by the generator seed and the
prompt id, so a text does not depend on how prompts are batched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from countboard.acs.datasets.text_prompts import SENTIMENT_LABELS, TextPrompt
from countboard.errors import ConfigError
from countboard.items import GeneratedText
from countboard.models.base import TextGenerator, stable_seed

NAMES = ("Anna", "Ben", "Clara", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jonas", "Keith", "Lena")
#: Sentence banks per sentiment label (``{name}`` is filled in). The last two of each are hard for lexicon
#: classifiers (relief without positive words, affect-laden topics told flatly, sarcasm), as generated text is.
SENTENCES: dict[str, tuple[str, ...]] = {
    "positive": (
        "{name} smiled, because it turned out to be a wonderful day.",
        "Everyone cheered and {name} felt truly happy.",
        "It was the best afternoon {name} could remember.",
        "{name} laughed with friends and loved every minute.",
        "The gift was perfect, and {name} was grateful and proud.",
        "Sunlight filled the room and {name} felt hopeful and calm.",
        "Their kindness made {name} glad to be home.",
        "{name} finally stopped worrying about the exam.",
        "No one was hurt, and {name} could breathe again.",
    ),
    "neutral": (
        "{name} took the bus to the station at noon.",
        "The table stood by the window next to two chairs.",
        "Later, {name} wrote a short note and went home.",
        "The meeting started at nine and ended at ten.",
        "{name} put the box on the shelf in the hallway.",
        "The street had a shop, a bakery and a bank.",
        "{name} read the instructions and turned the page.",
        "The documentary was about the war and the fire.",
        "{name} listened to a talk about happiness research.",
    ),
    "negative": (
        "{name} cried, because everything went terribly wrong.",
        "It was an awful day and {name} felt miserable.",
        "The news left {name} angry, hurt and alone.",
        "{name} hated the cold, dark and lonely night.",
        "Nothing worked, and {name} was sad and disappointed.",
        "The broken promise made {name} bitter and afraid.",
        "{name} lost the game and felt ashamed and hopeless.",
        "Great, another crash. Just what {name} needed!",
        "{name} was supposed to win the prize, but it went to someone else.",
    ),
}
OPENINGS = ("This is the story of {title}.", "{title}.", "It began with {title}.")


class ProceduralStoryGenerator(TextGenerator):
    """Stories that express the requested sentiment with a configured probability.

    Args:
        success: Probability of writing the requested label, one number or one per label.
        miss_weights: Relative weight of each label as the written label of a miss (default equal); the requested
            label is excluded.
        empty_rate: Probability of an empty output (a generator failure the task must report).
        labels: The label set (default positive / neutral / negative; word banks exist for these).
        device, batch_size, seed: As ``TextGenerator``.

    Example:
        >>> gen = ProceduralStoryGenerator(success=1.0)
        >>> out = gen.generate_batch([TextPrompt("p0", "…", "negative", "Rain")])[0]
        >>> out.true_label
        'negative'
    """

    knows_truth = True

    def __init__(self, success: float | Mapping[str, float] = 0.8, miss_weights: Mapping[str, float] | None = None,
                 empty_rate: float = 0.0, labels: Sequence[str] = SENTIMENT_LABELS, device: str = "cpu",
                 batch_size: int = 32, seed: int = 0):
        super().__init__(device, batch_size, seed)
        self.labels = tuple(labels)
        missing = [lab for lab in self.labels if lab not in SENTENCES]
        if missing:
            raise ConfigError(f"model.labels {missing} have no word bank; the procedural generator writes "
                              f"{list(SENTENCES)}")
        self.success = self._per_label("success", success)
        self.miss_weights = self._per_label("miss_weights", miss_weights if miss_weights is not None else 1.0,
                                            upper=None)
        if not 0.0 <= float(empty_rate) <= 1.0:
            raise ConfigError(f"model.empty_rate={empty_rate} must be in [0, 1]")
        self.empty_rate = float(empty_rate)

    def _per_label(self, key: str, value, upper: float | None = 1.0) -> dict[str, float]:
        values = dict(value) if isinstance(value, Mapping) else {lab: value for lab in self.labels}
        if set(values) != set(self.labels):
            raise ConfigError(f"model.{key} must give one value per label {list(self.labels)}, got {sorted(values)}")
        for lab, v in values.items():
            if not np.isfinite(float(v)) or float(v) < 0 or (upper is not None and float(v) > upper):
                raise ConfigError(f"model.{key}.{lab}={v} must be in [0, {upper if upper else 'inf'}]")
        return {lab: float(values[lab]) for lab in self.labels}

    def expected_success(self, label_counts: Mapping[str, int]) -> float:
        """The expected success rate over a prompt set with these requested-label counts.

        Example:
            >>> ProceduralStoryGenerator(success={"positive": 0.9, "neutral": 0.5, "negative": 0.8}
            ...                          ).expected_success({"positive": 1, "neutral": 2, "negative": 1})
            0.675
        """
        n = sum(label_counts.values())
        return sum(self.success[lab] * c for lab, c in label_counts.items() if lab in self.success) / n

    def written_label(self, prompt: TextPrompt, rng: np.random.Generator) -> str:
        """The label a story for ``prompt`` expresses (requested with probability ``success``)."""
        requested = prompt.label
        if requested not in self.success or rng.random() < self.success[requested]:
            return requested if requested in self.success else str(rng.choice(self.labels))
        others = [lab for lab in self.labels if lab != requested]
        w = np.array([self.miss_weights[lab] for lab in others])
        w = w / w.sum() if w.sum() > 0 else np.full(len(others), 1 / len(others))
        return str(others[int(rng.choice(len(others), p=w))])

    def story(self, prompt: TextPrompt, label: str, rng: np.random.Generator) -> str:
        name = NAMES[int(rng.integers(len(NAMES)))]
        bank = SENTENCES[label]
        picks = rng.choice(len(bank), size=int(rng.integers(2, 5)), replace=False)
        sentences = [bank[int(i)].format(name=name) for i in picks]
        if prompt.title:
            sentences.insert(0, OPENINGS[int(rng.integers(len(OPENINGS)))].format(title=prompt.title))
        return " ".join(sentences)

    def generate_batch(self, prompts: Sequence[TextPrompt]) -> list[GeneratedText]:
        out = []
        for p in prompts:
            rng = np.random.default_rng(stable_seed(self.seed, p.prompt_id))
            label = self.written_label(p, rng)
            empty = rng.random() < self.empty_rate
            out.append(GeneratedText(p, "" if empty else self.story(p, label, rng), label))
        return out
