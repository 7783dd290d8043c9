"""Question-answering auto-eval scores of a generated image (GeckoNum's Table 3: DSG and TIFA), asked to a VLM.

Both ask an image questions made from its prompt through the shared adapter (``countboard.models.asked``), every
question of every image of a batch in one greedy ``generate`` call, each image encoded once for all its questions
(``ask_questions``); the raw answers are kept per question (``AnswerRow``).

**DSG** (Cho et al., ICLR 2024, github j-min/DSG ``evaluate_image_dsg``): yes/no questions with parent
dependencies; an answer counts 1 when it is yes, a question whose parent is answered no (or was itself zeroed) counts
0 whatever it was answered, and the score is the mean over the questions. The questions are
(``DsgScore.questions``): the release's Task 3 questions of the prompt where it has them (``release_questions``;
they were made with DSG, but the release keeps no dependencies, so each is a root), else questions made here from
the prompt's entities in DSG's shape, one entity question and one count question per entity, the count question a
child of its entity question ("Are there dogs?" -> "Are there 3 dogs?"; ``dsg_questions``). DSG writes its
questions with an LLM; these templates, and the release's questions standing as roots, are ours.

**TIFA** (Hu et al., ICCV 2023, github Yushi-Hu/tifa ``tifa_score_single``): the score is the share of questions
answered as the prompt says. TIFA makes its questions with an LLM from the prompt's elements and answers them as
multiple choice (a free-form answer mapped to the nearest choice by SBERT); here (ours) each entity of the prompt (``prompts.csv``'s ``noun:number``) gives an existence
question ("Is there a dog?", expecting yes) and a count question ("How many dogs are in the image?", right when
the number ``models.answers.parse_count`` reads is the asked one; ``tifa_questions``).

**Answers that say neither** (ours, for both): a yes/no answer is read by ``models.answers.parse_yes_no`` and an
unparsable one is never yes: it is a failed question, recorded with its reason, and the score is taken over the
answered ones. A DSG question with an unanswered parent (and no parent answered no) cannot be judged and is left
out likewise. An image with no judged question has a NaN score for that metric.

Example:
    >>> qs = [Question(1, "Are there dogs?"), Question(2, "Are there 3 dogs?", parents=(1,))]
    >>> dsg_judge(qs, [False, True])[0], dsg_judge(qs, [True, True])[0], dsg_judge(qs, [None, True])[0]
    (0.0, 1.0, nan)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from countboard.errors import CountboardError
from countboard.models.answers import parse_count, parse_yes_no
from countboard.numeracy.datasets.prompts import PromptSpec
from countboard.numeracy.datasets.templates import plural


@dataclass(frozen=True)
class Question:
    """One question about an image: ``kind`` ``yes_no`` (the prompt says yes) or ``count`` (the prompt says
    ``target``); ``parents`` are DSG's dependencies (ids of this image's questions); ``source`` says where it came
    from (``release``: the release's Task 3, ``entities``: made from the prompt's entities)."""

    qid: int
    text: str
    kind: str = "yes_no"
    parents: tuple[int, ...] = ()
    target: int | None = None
    noun: str | None = None
    source: str = "entities"


@dataclass(frozen=True)
class AnswerRow:
    """One question asked of one image: what the VLM said, what it was read as, and what counted."""

    metric: str
    qid: int
    question: str
    kind: str
    parents: str
    target: float | None
    source: str
    answer: str
    parsed: float | None
    counted: float | None
    error: str | None


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def dsg_questions(spec: PromptSpec) -> list[Question]:
    """DSG-shaped questions from the prompt's entities: per entity with an exact number, an entity question (a
    root) and a count question (its child).

    Example:
        >>> from countboard.numeracy.datasets.prompts import Entity
        >>> spec = PromptSpec(0, "1 cat and 3 dogs.", "2-additive", (Entity("cat", "1"), Entity("dog", "3")))
        >>> [(q.qid, q.text, q.parents) for q in dsg_questions(spec)]  # doctest: +NORMALIZE_WHITESPACE
        [(1, 'Is there a cat?', ()), (2, 'Is there one cat?', (1,)), (3, 'Are there dogs?', ()),
         (4, 'Are there 3 dogs?', (3,))]
    """
    out: list[Question] = []
    for e in spec.entities:
        n = e.count
        if n is None:
            continue
        root = len(out) + 1
        exist = f"Is there {_a(e.noun)}?" if n == 1 else f"Are there {plural(e.noun)}?"
        count = f"Is there one {e.noun}?" if n == 1 else f"Are there {n} {plural(e.noun)}?"
        out += [Question(root, exist, noun=e.noun),
                Question(root + 1, count, parents=(root,), target=n, noun=e.noun)]
    return out


def tifa_questions(spec: PromptSpec) -> list[Question]:
    """TIFA-style questions from the prompt's entities: per entity with an exact number, an existence question
    (yes expected) and a count question (its number expected).

    Example:
        >>> from countboard.numeracy.datasets.prompts import Entity
        >>> spec = PromptSpec(0, "2 apples.", "numeric_simple", (Entity("apple", "2"),))
        >>> [(q.text, q.kind, q.target) for q in tifa_questions(spec)]
        [('Is there an apple?', 'yes_no', None), ('How many apples are in the image?', 'count', 2)]
    """
    out: list[Question] = []
    for e in spec.entities:
        if e.count is None:
            continue
        out += [Question(len(out) + 1, f"Is there {_a(e.noun)}?", noun=e.noun),
                Question(len(out) + 2, f"How many {plural(e.noun)} are in the image?", "count",
                         target=int(e.count), noun=plural(e.noun))]
    return out


def release_questions(path: str | Path) -> dict[int, list[Question]]:
    """The release's Task 3 questions per prompt id (the same for every generator), each a root, by question id.

    Raises:
        CountboardError: One question id of a prompt has two texts; the message names both files.
    """
    from countboard.numeracy.release import read_annotations, split_image_id

    ann = read_annotations(path, 3)
    out: dict[int, dict[int, tuple[str, str]]] = {}
    for image, qid, text, file, line in zip(ann["image_id"].astype(str), ann["question_id"].astype(str),
                                            ann["question"].astype(str), ann["file"].astype(str), ann["line"],
                                            strict=True):
        pid = split_image_id(image)[0]
        seen = out.setdefault(pid, {}).setdefault(int(qid), (text, f"{file} line {line}"))
        if seen[0] != text:
            raise CountboardError(f"GeckoNum Task 3 question {qid} of prompt {pid} reads {seen[0]!r} in {seen[1]} "
                                  f"but {text!r} in {file} line {line}: use one release's annotation files")
    return {pid: [Question(q, t, source="release") for q, (t, _) in sorted(qs.items())] for pid, qs in out.items()}


def dsg_judge(questions: Sequence[Question], said: Sequence[bool | None]) -> tuple[float, list[float | None]]:
    """DSG's score of one image from its yes/no answers (None: unparsable), and what each question counted
    (1, 0, or None when left out; module docstring)."""
    index = {q.qid: k for k, q in enumerate(questions)}
    counted: dict[int, float | None] = {}

    def value(k: int, path: tuple[int, ...] = ()) -> float | None:
        if k in counted:
            return counted[k]
        parents = [index[p] for p in questions[k].parents if p in index and index[p] not in path]
        above = [value(p, (*path, k)) for p in parents]
        if any(v == 0.0 for v in above):
            out: float | None = 0.0  # DSG: a parent answered no zeroes its children
        elif any(v is None for v in above) or said[k] is None:
            out = None
        else:
            out = float(bool(said[k]))
        counted[k] = out
        return out

    values = [value(k) for k in range(len(questions))]
    judged = [v for v in values if v is not None]
    return (float(np.mean(judged)) if judged else float("nan")), values


def tifa_judge(questions: Sequence[Question], parsed: Sequence[float | None]) -> tuple[float, list[float | None]]:
    """TIFA's score of one image: the share of answered questions answered as the prompt says (``parsed``: 1/0
    for yes/no, the count read, None when unparsable)."""
    values: list[float | None] = []
    for q, p in zip(questions, parsed, strict=True):
        if p is None:
            values.append(None)
        else:
            values.append(float(p == (q.target if q.kind == "count" else 1.0)))
    judged = [v for v in values if v is not None]
    return (float(np.mean(judged)) if judged else float("nan")), values


class DsgScore:
    """DSG's score (module docstring) with the release's Task 3 questions where a prompt has them.

    Args:
        release: Prompt id -> the release's Task 3 questions (``release_questions``); other prompts get
            ``dsg_questions``.
    """

    key = "dsg"

    def __init__(self, release: Mapping[int, Sequence[Question]] | None = None):
        self.release = dict(release or {})

    def questions(self, spec: PromptSpec) -> list[Question]:
        return list(self.release.get(spec.prompt_id) or dsg_questions(spec))

    def judge(self, questions: Sequence[Question], answers: Sequence[str]) -> tuple[float, list[AnswerRow]]:
        read = [parse_yes_no(a) for a in answers]
        score, counted = dsg_judge(questions, [r.value for r in read])
        return score, [_row(self.key, q, a, None if r.value is None else float(r.value), c, r.error)
                       for q, a, r, c in zip(questions, answers, read, counted, strict=True)]


class TifaScore:
    """TIFA's score over questions made from the prompt's entities (module docstring)."""

    key = "tifa"

    def questions(self, spec: PromptSpec) -> list[Question]:
        return tifa_questions(spec)

    def judge(self, questions: Sequence[Question], answers: Sequence[str]) -> tuple[float, list[AnswerRow]]:
        parsed, errors = [], []
        for q, a in zip(questions, answers, strict=True):
            if q.kind == "count":
                c = parse_count(a, q.noun)
                parsed.append(c.count)
                errors.append(c.error)
            else:
                r = parse_yes_no(a)
                parsed.append(None if r.value is None else float(r.value))
                errors.append(r.error)
        score, counted = tifa_judge(questions, parsed)
        return score, [_row(self.key, q, a, p, c, e)
                       for q, a, p, c, e in zip(questions, answers, parsed, counted, errors, strict=True)]


def _row(metric: str, q: Question, answer: str, parsed: float | None, counted: float | None,
         error: str | None) -> AnswerRow:
    return AnswerRow(metric, q.qid, q.text, q.kind, ",".join(map(str, q.parents)),
                     None if q.target is None else float(q.target), q.source, answer, parsed, counted,
                     (error or "unparsable answer") if parsed is None and counted is None else
                     ("a parent question has no answer" if counted is None else None))


def ask_questions(asked: Any, images: Sequence[Any], specs: Sequence[PromptSpec], scorers: Sequence[Any]
                  ) -> list[dict[str, Any]]:
    """Every scorer's questions about every image in one ``asked.ask`` call (the same image object for all the
    questions of an image, so that it is encoded once); per image ``{"score_<key>": score, "vlm_answers": JSON of
    the answer rows}``."""
    pairs: list[tuple[int, Any, Question]] = []
    for i, spec in enumerate(specs):
        pairs += [(i, s, q) for s in scorers for q in s.questions(spec)]
    said = asked.ask([images[i] for i, _, _ in pairs], [q.text for _, _, q in pairs]) if pairs else []
    asked_of: dict[tuple[int, str], list[tuple[Question, str]]] = {}
    for (i, s, q), a in zip(pairs, said, strict=True):
        asked_of.setdefault((i, s.key), []).append((q, a))
    out = []
    for i in range(len(specs)):
        rec: dict[str, Any] = {}
        rows: list[dict[str, Any]] = []
        for s in scorers:
            mine = asked_of.get((i, s.key), [])
            score, judged = s.judge([q for q, _ in mine], [a for _, a in mine])
            rec[f"score_{s.key}"] = score
            rows += [asdict(r) for r in judged]
        out.append(rec | {"vlm_answers": json.dumps(rows)})
    return out
