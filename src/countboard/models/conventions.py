"""Every published convention that scores a counting answer given in words, each as its harness's code does it.

The same raw answers score differently under each harness's rule, and published comparisons mix them; a run of a
model asked in words stores its answers once and logs its accuracy under each (``convention_accuracies``). Each
rule is named after the file and function that define it; ``target`` is the ground-truth count (an integer, or
the dataset's answer text where it ships one):

- ``conv_lmms_eval_countbench``: lmms-eval ``lmms_eval/tasks/countbench/utils.py``, ``countbench_process_results``:
  the answer ``str(...).strip().lower()``, a whole answer that is a number word of zero to twenty (or ``none``)
  replaced by its digits, must equal the target normalised the same way (``models.answers.strict_answer``).
- ``conv_lmms_eval_countbenchqa``: lmms-eval ``lmms_eval/tasks/countbenchqa/utils.py``,
  ``countbenchqa_process_results``: ``results[0].strip() == str(doc["number"])`` (``"3."``, ``"There are 3"`` and
  ``"three"`` score 0).
- ``conv_lmms_eval_pixmo_count``: lmms-eval ``lmms_eval/tasks/pixmo_count/utils.py``,
  ``pixmo_count_process_results``: the first ``\\d+`` of the stripped answer (the stripped answer itself when it has
  none) must equal the first ``\\d+`` of the stripped target (``"12 or 13"`` is 12, ``"three"`` never matches).
- ``conv_lmms_eval_pixmo_count_reasoning``: lmms-eval ``lmms_eval/tasks/pixmo_count/reasoning/utils.py``,
  ``pixmo_count_reasoning_process_results`` (its ``acc_score``, by ``lmms_eval/tasks/_task_utils/reasoning_utils.py``,
  ``compute_score``): the target's first ``\\d+``; the answer's ``<answer>...</answer>`` (the first, across lines),
  else the content of its last ``\\boxed{...}``, else the last line that ends in a number (``extract_anwser_tag``);
  one trailing ``.`` and the spaces dropped from both (``simple_parse``), then ``relax_exact_match``: equal, or one
  inside the other and at least 90 % of its length. ``acc_reward``'s fallback, math_verify's ``verify(parse(gt),
  parse(pred))``, is applied where the extracted answer is a plain decimal number (numeric equality, ``"3.0"``
  is 3); math_verify is no dependency here, so free text it might still read scores 0. The LLM judge
  (``USE_LLM_JUDGE``) is off, as by default. The model is asked with ``REASONING_SYSTEM_PROMPT``.
- ``conv_vlmevalkit_countbenchqa``: VLMEvalKit ``vlmeval/dataset/image_vqa.py``, ``CountBenchQA.evaluate``:
  ``ans in pred`` with ``pred = str(prediction)``, ``ans = str(answer)``: a substring test, so ``"2"`` matches
  ``"12"`` and ``"There are 2 or 3"``.
- ``conv_vlmevalkit_tallyqa``: VLMEvalKit ``vlmeval/dataset/image_vqa.py``, ``TallyQA.evaluate`` with
  ``vlmeval/dataset/utils/tallyqa.py``, ``extract_count_from_prediction``: the lower-cased answer's first match of
  ``\\b([0-9]|1[0-9]|20)\\b`` or ``\\b(zero|one|...|twenty)\\b`` (leftmost wins), as an integer 0-20, must equal
  ``int(answer)``; no match (``"25"``, ``"3rd"``, ``""``) is wrong.
- ``conv_countboard``: ours, ``models.answers.parse_count`` (docs/counters.md, "Models asked in words"): the
  parsed count equals the target; an unparsable answer is wrong.

The denominator is every answered question, as in each harness: an answer our parser cannot read is wrong under
ours and still scored by the others.

Example:
    >>> [CONVENTIONS[k].score("There are 3", 3) for k in ("conv_lmms_eval_countbenchqa", "conv_lmms_eval_pixmo_count")]
    [False, True]
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from countboard.models.answers import strict_answer

_FIRST_INTEGER = re.compile(r"\d+")
_TALLY_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
                "twenty")
_TALLY = re.compile(r"((\b([0-9]|1[0-9]|20)\b)|\b(" + "|".join(_TALLY_WORDS) + r")\b)")


def _target_text(target) -> str:
    """The target as a harness writes it: an integral number as its digits, text as it is."""
    if isinstance(target, str):
        return target
    value = float(target)
    return str(int(value)) if value.is_integer() else str(target)


def lmms_eval_countbench(answer: str, target) -> bool:
    """lmms-eval ``countbench_process_results`` (module docstring).

    Example:
        >>> [lmms_eval_countbench(a, 3) for a in ("3", " Three ", "3.", "three dogs")]
        [True, True, False, False]
    """
    return strict_answer(answer) == strict_answer(_target_text(target))


def lmms_eval_countbenchqa(answer: str, target) -> bool:
    """lmms-eval ``countbenchqa_process_results``: the stripped answer equals the target's digits.

    Example:
        >>> [lmms_eval_countbenchqa(a, 3) for a in ("3", " 3\\n", "3.", "There are 3", "three")]
        [True, True, False, False, False]
    """
    return str(answer).strip() == _target_text(target)


def lmms_eval_pixmo_count(answer: str, target) -> bool:
    """lmms-eval ``pixmo_count_process_results``: first integer of the answer against the target's.

    Example:
        >>> [lmms_eval_pixmo_count(a, 12) for a in ("12", "There are 12 cars.", "2", "12.5", "1 2", "twelve")]
        [True, True, False, True, False, False]
    """
    pred = str(answer).strip()
    truth = _target_text(target).strip()
    found = _FIRST_INTEGER.search(truth)
    truth = found.group() if found else truth
    found = _FIRST_INTEGER.search(pred)
    return (found.group() if found else pred) == truth


#: lmms-eval ``reasoning_utils.py::DEFAULT_REASONING_SYSTEM_PROMPT``, the system message of ``pixmo_count_reasoning``
#: (``make_reasoning_doc_to_messages``; the user turn is the image and the question, without a post-prompt).
REASONING_SYSTEM_PROMPT = (
    "You are a helpful assistant. When user asks a question, your response must include two parts: "
    "first, reasoning process enclosed in <analysis>...</analysis> tags, then final answer enclosed in "
    "<answer>...</answer> tags."
    "Please provide a clear, concise response within <answer> </answer> tags that directly addresses to question."
)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_LINE_NUMBER = re.compile(r"\b(\d+(?:\.\d+)?)\b(?:\s*\.?\s*$)")
_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")
_BOXED = "\\boxed{"


def boxed_answer(text: str) -> str:
    r"""lmms-eval ``extract_boxed_answer``: the content of the last ``\boxed{...}`` whose braces close, or "".

    Example:
        >>> boxed_answer("so \\boxed{4} or \\boxed{{5}}"), boxed_answer("\\boxed{3")
        ('{5}', '')
    """
    results = []
    start = text.find(_BOXED)
    while start != -1:
        depth, pos = 0, start + len(_BOXED) - 1
        while pos < len(text):
            if text[pos] == "{":
                depth += 1
            elif text[pos] == "}":
                depth -= 1
                if depth == 0:
                    results.append(text[start + len(_BOXED):pos])
                    break
            pos += 1
        start = text.find(_BOXED, start + 1)
    return results[-1] if results else ""


def reasoning_answer(text: str) -> str:
    r"""lmms-eval ``extract_anwser_tag``: the first ``<answer>`` tag's text, else ``boxed_answer``, else the number
    that ends the last line ending in one, else "".

    Example:
        >>> [reasoning_answer(t) for t in ("<analysis>..</analysis><answer> 7 </answer>", "it is \\boxed{7}",
        ...                                  "I count 7.\nDone", "no number")]
        [' 7 ', '7', '7', '']
    """
    found = _ANSWER_TAG.search(text)
    if found:
        return found.group(1)
    boxed = boxed_answer(text)
    if boxed:
        return boxed
    for line in reversed(text.strip().split("\n")):
        if line.strip():
            number = _LINE_NUMBER.search(line)
            if number:
                return number.group(1)
    return ""


def _simple_parse(text: str) -> str:
    """lmms-eval ``simple_parse``: one trailing period dropped, then stripped."""
    return (text[:-1] if text.endswith(".") else text).strip()


def relax_exact_match(pred: str, truth: str, portion: float = 0.9) -> bool:
    """lmms-eval ``relax_exact_match`` for a target that is no choice letter (a count's digits never parse as one):
    one string inside the other and at least ``portion`` of its length, or equal once stripped.

    Example:
        >>> [relax_exact_match(p, "12") for p in ("12", "1", "112", "")]
        [True, False, False, False]
    """
    if pred in truth and len(pred) >= portion * len(truth):
        return True
    if truth in pred and len(truth) >= portion * len(pred):
        return True
    return pred.strip() == truth.strip()


def lmms_eval_pixmo_count_reasoning(answer: str, target) -> bool:
    r"""lmms-eval ``pixmo_count_reasoning_process_results``' ``acc_score`` (module docstring).

    Example:
        >>> [lmms_eval_pixmo_count_reasoning(a, 12) for a in ("<analysis>4 rows of 3</analysis><answer>12</answer>",
        ...     "\\boxed{12.}", "Counting them: 12", "<answer>12.0</answer>", "<answer>twelve</answer>", "12 cars")]
        [True, True, True, True, False, False]
    """
    truth = _target_text(target).strip()
    found = _FIRST_INTEGER.search(truth)
    truth = _simple_parse(found.group() if found else truth)
    pred = _simple_parse(reasoning_answer(str(answer).strip()).strip())
    if relax_exact_match(pred, truth):
        return True
    # acc_reward's math_verify fallback, on plain numbers (its numeric equality)
    if _DECIMAL.fullmatch(pred) and _DECIMAL.fullmatch(truth):
        return float(pred) == float(truth)
    return False


def vlmevalkit_countbenchqa(answer: str, target) -> bool:
    """VLMEvalKit ``CountBenchQA.evaluate``: the target's text is a substring of the answer.

    Example:
        >>> [vlmevalkit_countbenchqa(a, 2) for a in ("2", "12", "There are 2 or 3", "two", "")]
        [True, True, True, False, False]
    """
    return _target_text(target) in str(answer)


def tallyqa_count(answer) -> int | None:
    """VLMEvalKit's ``extract_count_from_prediction``: an integer 0-20 read from the answer, or None.

    Example:
        >>> [tallyqa_count(a) for a in ("3", "There are twelve.", "25", "3rd", "seventeen", "20 or 21", "")]
        [3, 12, None, None, 17, 20, None]
    """
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        if isinstance(answer, float) and math.isnan(answer):
            return None
        return int(answer) if 0 <= answer <= 20 else None
    found = _TALLY.search(str(answer).lower())
    if not found:
        return None
    text = found.group()
    return int(text) if text.isdigit() else _TALLY_WORDS.index(text)


def vlmevalkit_tallyqa(answer: str, target) -> bool:
    """VLMEvalKit ``TallyQA.evaluate``: the extracted count equals ``int(target)``.

    Example:
        >>> [vlmevalkit_tallyqa(a, 3) for a in ("3", "Three.", "I see 3 dogs and 2 cats", "no", "")]
        [True, True, True, False, False]
    """
    count = tallyqa_count(answer)
    return count is not None and count == int(float(target))


@dataclass(frozen=True)
class Convention:
    """One harness's rule: its metric ``key``, where it is defined (``harness``, ``source``, ``function``) and
    ``score(answer, target)``."""

    key: str
    harness: str
    source: str
    function: str
    score: Callable[[str, object], bool]

    @property
    def label(self) -> str:
        return f"{self.harness} {self.source}::{self.function}"


#: Each published convention, by metric key (``conv_countboard`` scores the parsed counts: ``convention_hits``).
CONVENTIONS: dict[str, Convention] = {c.key: c for c in (
    Convention("conv_lmms_eval_countbench", "lmms-eval", "lmms_eval/tasks/countbench/utils.py",
               "countbench_process_results", lmms_eval_countbench),
    Convention("conv_lmms_eval_countbenchqa", "lmms-eval", "lmms_eval/tasks/countbenchqa/utils.py",
               "countbenchqa_process_results", lmms_eval_countbenchqa),
    Convention("conv_lmms_eval_pixmo_count", "lmms-eval", "lmms_eval/tasks/pixmo_count/utils.py",
               "pixmo_count_process_results", lmms_eval_pixmo_count),
    Convention("conv_lmms_eval_pixmo_count_reasoning", "lmms-eval", "lmms_eval/tasks/pixmo_count/reasoning/utils.py",
               "pixmo_count_reasoning_process_results", lmms_eval_pixmo_count_reasoning),
    Convention("conv_vlmevalkit_countbenchqa", "VLMEvalKit", "vlmeval/dataset/image_vqa.py",
               "CountBenchQA.evaluate", vlmevalkit_countbenchqa),
    Convention("conv_vlmevalkit_tallyqa", "VLMEvalKit", "vlmeval/dataset/image_vqa.py",
               "TallyQA.evaluate", vlmevalkit_tallyqa),
)}
OURS = "conv_countboard"
#: Every convention key, ours last.
CONVENTION_KEYS = (*CONVENTIONS, OURS)


def convention_hits(answers: Sequence[str], targets: Sequence, counts: Sequence[float]) -> dict[str, np.ndarray]:
    """0/1 per answer under each convention: the harnesses' rules on the raw ``answers``, ours on the parsed
    ``counts`` (NaN where the answer was unparsable).

    Example:
        >>> hits = convention_hits(["3.", "12"], [3, 2], [3.0, 12.0])
        >>> {k: v.tolist() for k, v in hits.items() if k in ("conv_vlmevalkit_countbenchqa", "conv_countboard")}
        {'conv_vlmevalkit_countbenchqa': [1.0, 1.0], 'conv_countboard': [1.0, 0.0]}
    """
    if not len(answers) == len(targets) == len(counts):
        raise ValueError(f"{len(answers)} answers, {len(targets)} targets and {len(counts)} counts: one each")
    out = {key: np.array([float(c.score(a, t)) for a, t in zip(answers, targets, strict=True)])
           for key, c in CONVENTIONS.items()}
    parsed = np.asarray(counts, dtype=np.float64)
    truth = np.array([float(t) for t in targets], dtype=np.float64)
    out[OURS] = (np.isfinite(parsed) & (parsed == truth)).astype(np.float64)
    return out


def convention_accuracies(answers: Sequence[str], targets: Sequence, counts: Sequence[float]) -> dict[str, float]:
    """Accuracy (%) of the answers under each convention (``convention_hits``); NaN without answers.

    Example:
        >>> acc = convention_accuracies(["3", "three", "There are 3."], [3, 3, 3], [3.0, 3.0, 3.0])
        >>> acc["conv_lmms_eval_countbench"], acc["conv_lmms_eval_pixmo_count"], acc["conv_countboard"]
        (66.66666666666666, 66.66666666666666, 100.0)
    """
    return {key: float(100 * hits.mean()) if len(hits) else float("nan")
            for key, hits in convention_hits(answers, targets, counts).items()}
