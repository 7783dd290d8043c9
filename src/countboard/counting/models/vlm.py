"""A vision-language model as a counter: asked "How many <noun> are in the image?", its answer parsed.

``VlmCounter`` asks every (image, class) pair through the shared adapter (``countboard.models.asked``): the pairs
of a batch go through one ``generate`` call, each image encoded once for all its questions. Its counts are
``AnsweredCounts``: the parsed count (``countboard.models.answers``) with the raw answer kept; an answer that
states no count has a NaN count and its error, and the task fails that unit with the raw answer in the message.

``answers=count`` (the default) reads one number: such a counter does not say where the objects are
(``localising`` is False), so tasks that read parts of the maps (``praco_mosaic``) refuse it before the run, and
tasks that only need counts (``praco_negative``, ``classic``, ``praco_multiclass`` without its localized
metrics, ``geckonum_autoeval``) run it. ``answers=points`` reads pointing answers (Molmo's point tags): the count
is the number of points and the density map has unit mass at each point, so every counting task runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from countboard.errors import ConfigError
from countboard.items import ImageItem
from countboard.models.answers import parse_count, parse_named_count, parse_points
from countboard.models.base import AnsweredCounts, Counter, check_one_prompt_each

ANSWERS = ("count", "points", "named")
DEFAULT_QUESTION = "How many {noun} are in the image?"


class VlmCounter(Counter):
    """Counts by asking an image-text-to-text model (``AutoModelForImageTextToText``) in words.

    Args:
        model_id: Hub id or local directory.
        question: Template of the question; ``{noun}`` is the prompted class name.
        answers: ``count`` (one number per answer), ``points`` (point tags, one per object) or ``named`` (an open
            question that names no class, the BCC study's judge: the count of the prompted class the answer names,
            0 when it names another; ``models.answers.parse_named_count``).
        max_new_tokens: Longest answer, in tokens.
        prompt: ``auto`` (chat template when the processor has one), ``chat`` or ``plain``.
        prompt_prefix: Put before the question in a plain prompt (``"answer en "`` for PaliGemma).
        system_prompt: A system message for chat prompts.
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        reuse_image_features: Encode each image once for all of its questions (same answers, faster).
        trust_remote_code: Let transformers run the checkpoint's code (Molmo).
        revision: Hub revision.
        device: ``"cpu"`` or ``"cuda"``.
    """

    operational_params = {"reuse_image_features": "the same answers, with each image encoded once"}

    def __init__(self, model_id: str | None = None, question: str = DEFAULT_QUESTION, answers: str = "count",
                 max_new_tokens: int = 16, prompt: str = "auto", prompt_prefix: str = "",
                 system_prompt: str | None = None, dtype: str = "auto", reuse_image_features: bool = True,
                 trust_remote_code: bool = False, revision: str | None = None, device: str = "cpu"):
        super().__init__(device=device)
        from countboard.models.asked import AskedModel

        check_settings(question, answers, model_id)
        self.question, self.answers = question, answers
        self.localising = answers == "points"
        self.asked = AskedModel(model_id, device=device, max_new_tokens=max_new_tokens, prompt=prompt,
                                prompt_prefix=prompt_prefix, system_prompt=system_prompt, dtype=dtype,
                                reuse_image_features=reuse_image_features, trust_remote_code=trust_remote_code,
                                revision=revision)

    @classmethod
    def localises(cls, node: Mapping[str, Any]) -> bool:
        return node.get("answers", "count") == "points"

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        from countboard.models.asked import AskedModel

        check_settings(node.get("question", DEFAULT_QUESTION), node.get("answers", "count"), node.get("model_id"))
        AskedModel.preflight(str(node["model_id"]))
        super().preflight(node)

    def _ask(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> list[str]:
        check_one_prompt_each(features, prompts, "image features", "pair")
        return self.asked.ask([f.image for f in features], [self.question.format(noun=p) for p in prompts])

    def decode_counts(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> AnsweredCounts:
        """The parsed count of every pair's answer, with the raw answers (NaN and the reason where none)."""
        raw = self._ask(features, prompts)
        counts, errors = [], []
        for answer, noun in zip(raw, prompts, strict=True):
            if self.localising:
                pts = parse_points(answer)
                counts.append(float("nan") if pts is None else float(len(pts)))
                errors.append("no point tags in the answer" if pts is None else None)
            else:
                parsed = parse_named_count(answer, noun) if self.answers == "named" else parse_count(answer, noun)
                counts.append(float("nan") if parsed.count is None else parsed.count)
                errors.append(parsed.error)
        return AnsweredCounts(counts, raw, errors)

    def decode(self, features: Sequence[ImageItem], prompts: Sequence[str]) -> list[np.ndarray]:
        """Unit mass at each point of a pointing answer; a model that answers one number has no map."""
        if not self.localising:
            raise ValueError("model.answers=count: the model answers one number, which says nothing about where "
                             "the objects are, so it makes no density map")
        maps = []
        for feat, answer in zip(features, self._ask(features, prompts), strict=True):
            pts = parse_points(answer)
            if pts is None:
                raise ValueError(f"unparsable answer {answer!r} (no point tags in the answer)")
            h, w = feat.size
            out = np.zeros((h, w), dtype=np.float32)
            rows = np.clip((pts[:, 1] * h).astype(int), 0, h - 1)
            cols = np.clip((pts[:, 0] * w).astype(int), 0, w - 1)
            np.add.at(out, (rows, cols), 1.0)
            maps.append(out)
        return maps


def check_settings(question: str, answers: str, model_id: str | None = "") -> None:
    """The settings of a model asked in words, named by the node's key (``model``, or a task's ``task.vlm``)."""
    from countboard.models.hf_loading import current_node_key

    key = current_node_key()
    pick = "model=" if key == "model" else f"model@{key}="
    if not model_id:
        raise ConfigError(f"{key}.model_id is not set: give a hub id or a local folder ({key}.model_id=...), or "
                          f"pick a preset ({pick}vlm_llava_1_5_7b, {pick}vlm_paligemma_3b_pt_448, ...)")
    if answers not in ANSWERS:
        raise ConfigError(f"{key}.answers={answers!r}: use one of {', '.join(ANSWERS)}")
    if "{noun}" not in str(question) and answers != "named":
        raise ConfigError(f"{key}.question={question!r} has no {{noun}}: write where the class name goes, e.g. "
                          f"{DEFAULT_QUESTION!r} (or {key}.answers=named for an open question such as the BCC "
                          "study's)")
