"""Turn GeckoNum annotation rows into scored units, as the paper describes (Section 4).

* Task 1: one unit per image-question pair (one or more count questions per entity). Fractional answers (ranges,
  "1.5") are rounded up (``ranges="up"``), the label is the mode of the annotators' counts with the first-given
  answer winning a tie (``ties="first"``), correct when it equals the number the question asks for: the entity's
  number, or the sum over the entities a bare noun names ("How many mushrooms" in "2 white mushrooms and 1 red
  mushroom" asks for 3).
* Task 2: one unit per image; the mode of the encoded answers (0-4) against ``gt_num``, same tie rule.
* Task 3: one unit per image; the mean of the yes (1) / no (0) answers over its questions and annotators.

Rows that cannot be used are dropped and reported as ``ImportProblem`` (file, line, what was wrong): an unknown
generator name, an image whose prompt id is not in ``prompts.csv``, an answer that cannot be read, a question that
names no entity of its prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from countboard.metrics.numeracy import mode_labels, round_answers
from countboard.numeracy.answers import parse_count_answers
from countboard.numeracy.release import GENERATORS

_QUESTION = re.compile(r"^how many (.+?) (?:are|is)\b(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class ImportProblem:
    """A row (or a whole file, ``line`` 0) that was left out, and why."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


@dataclass
class ScoredTask:
    """Scored units of one annotation task, with what was left out."""

    task: int
    units: pd.DataFrame
    problems: list[ImportProblem] = field(default_factory=list)


def _problems(rows: pd.DataFrame, message: str | pd.Series) -> list[ImportProblem]:
    msgs = message if isinstance(message, pd.Series) else pd.Series(message, index=rows.index)
    return [
        ImportProblem(str(f), int(n), str(m))
        for f, n, m in zip(rows["file"], rows["line"], msgs.loc[rows.index], strict=True)
    ]


def check_rows(
    ann: pd.DataFrame, prompts: pd.DataFrame, generators: Iterable[str] | None = None
) -> tuple[pd.DataFrame, list[ImportProblem]]:
    """Keep rows with a known generator and an image id whose prompt is in ``prompts``; report the others.

    Adds ``prompt_id`` and ``seed`` (ints) from the image id ``geckonum_<prompt_id>_<seed>``.

    Args:
        ann: Rows from ``read_annotations`` (with ``file`` and ``line``).
        prompts: ``read_prompts`` output.
        generators: Allowed generator names; default the seven of the study.
    """
    allowed = set(GENERATORS if generators is None else generators)
    problems: list[ImportProblem] = []
    model = ann["model"].astype("category")
    bad = ~model.isin(allowed).to_numpy()
    if bad.any():
        problems += _problems(
            ann[bad],
            "unknown generator " + ann.loc[bad, "model"].astype(str).map(repr) + f"; known: "
            f"{', '.join(sorted(allowed))} (pass the name as an allowed generator to import it)",
        )
    image = ann["image_id"].astype("category")
    parts = pd.Series(image.cat.categories, dtype=str).str.extract(r"_(\d+)_(\d+)$")
    codes = image.cat.codes.to_numpy()
    pid = pd.to_numeric(parts[0], errors="coerce").to_numpy()[codes]
    seed = pd.to_numeric(parts[1], errors="coerce").to_numpy()[codes]
    bad_id = np.isnan(pid) & ~bad
    if bad_id.any():
        problems += _problems(
            ann[bad_id],
            "image id "
            + ann.loc[bad_id, "image_id"].astype(str).map(repr)
            + " is not geckonum_<prompt_id>_<seed>",
        )
    missing = ~bad & ~bad_id & ~np.isin(pid, prompts.index.to_numpy())
    if missing.any():
        problems += _problems(
            ann[missing],
            "prompt id "
            + pd.Series(pid[missing], index=ann.index[missing]).astype("Int64").astype(str)
            + " of image "
            + ann.loc[missing, "image_id"].astype(str)
            + " is not in prompts.csv",
        )
    keep = ~(bad | bad_id | missing)
    out = ann[keep].copy()
    out["prompt_id"] = pid[keep].astype(int)
    out["seed"] = seed[keep].astype(int)
    out["model"] = out["model"].astype(str).astype("category")
    out["image_id"] = out["image_id"].astype("category")
    return out, problems


def _plural_forms(noun: str) -> set[str]:
    forms = {noun, noun + "s", noun + "es"}
    if noun.endswith("y"):
        forms.add(noun[:-1] + "ies")
    if noun.endswith("f"):
        forms.add(noun[:-1] + "ves")
    if noun.endswith("fe"):
        forms.add(noun[:-2] + "ves")
    return forms


def question_entity(question: str, entities: list[tuple[str, str]]) -> int | None:
    """Index of the entity a "How many <noun> ..." question asks about, or ``None``.

    The noun may carry the entity's attribute ("black apples") or not ("apples"); relation questions ("How many
    dogs are to the left of coconuts?") ask about their first noun.

    Example:
        >>> question_entity("How many apples are in the image?", [("black koala", "2"), ("black apple", "2")])
        1
    """
    m = _QUESTION.match(question.strip())
    if not m:
        return None
    phrase = m.group(1).strip().lower()
    for full in (True, False):
        for i, (noun, _) in enumerate(entities):
            noun = noun.lower()
            candidates = _plural_forms(noun) if full else _plural_forms(noun.split()[-1])
            if phrase in candidates:
                return i
    return None


def _asks_whole_entity(question: str, noun: str) -> bool:
    """True for "How many <noun with its attribute> are in the image?" (not the bare noun, not a relation)."""
    q = question.lower()
    return q.endswith(" in the image?") and any(
        q.startswith(f"how many {f} ") for f in _plural_forms(noun.lower())
    )


def question_target(question: str, entities: list[tuple[str, str]]) -> tuple[int | None, float]:
    """Entity index (as ``question_entity``) and the number a Task 1 question asks for.

    A bare noun that several entities share ("How many mushrooms are in the image?" for "2 white mushrooms and
    1 red mushroom") asks for all of them: the target is the sum of their numbers (3), which is how the paper's
    Table A2 gets numbers up to 8 for 2-additive-color prompts whose entities have 1-4.

    Example:
        >>> question_target("How many mushrooms are in the image?", [("white mushroom", "2"), ("red mushroom", "1")])
        (0, 3.0)
    """
    i = question_entity(question, entities)
    if i is None:
        return None, float("nan")
    number = pd.to_numeric(entities[i][1], errors="coerce")
    m = _QUESTION.match(question.strip())
    phrase = m.group(1).strip().lower() if m else ""
    whole = any(phrase in _plural_forms(noun.lower()) for noun, _ in entities)
    if not whole and m and m.group(2).strip().lower() == "in the image?":
        shared = [pd.to_numeric(v, errors="coerce") for noun, v in entities
                  if phrase in _plural_forms(noun.lower().split()[-1])]  # fmt: skip
        if len(shared) > 1:
            number = float(np.sum(shared))
    return i, float(number)


def _task1_targets(qs: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """Entity, its number (``target``) and ``primary`` (see ``_asks_whole_entity``) of each distinct question."""
    targets, entity, primary = [], [], []
    for pid, question in zip(qs["prompt_id"], qs["question"], strict=True):
        ents = prompts.at[pid, "entities"]
        i, target = question_target(str(question), ents)
        noun = ents[i][0] if i is not None else ""
        targets.append(target)
        entity.append(noun)
        primary.append(i is not None and _asks_whole_entity(str(question), noun))
    return qs.assign(target=targets, entity=entity, primary=primary)


def score_task1(
    ann: pd.DataFrame, prompts: pd.DataFrame, ties: str = "first", ranges: str = "up"
) -> ScoredTask:
    """Task 1 units (image-question pairs) from checked rows (``check_rows`` output).

    The processed ``answer`` column is read first, the typed ``raw_answer`` where it is empty or unreadable.
    ``ranges`` and ``ties`` are the rules of ``round_answers`` and ``mode_labels``; the order of answers for
    ``ties="first"`` is their line in the file.
    """
    values, ok = parse_count_answers(ann["answer"])
    if not ok.all():
        raw_values, raw_ok = parse_count_answers(ann["raw_answer"])
        values = np.where(ok, values, raw_values)
        ok = ok | raw_ok
    problems = _problems(
        ann[~ok],
        "cannot read answer "
        + ann.loc[~ok, "raw_answer"].astype(str).map(repr)
        + " as a count (expected e.g. '3', 'three', '2-3', '10+')",
    )
    df = ann.assign(value=round_answers(values, ranges))[ok]
    qs = df.drop_duplicates(["prompt_id", "question"])[["prompt_id", "question", "file", "line"]]
    qs = _task1_targets(qs, prompts)
    bad_q = qs["target"].isna()
    if bad_q.any():
        bad_keys = qs.loc[bad_q, ["prompt_id", "question"]]
        rows = df.merge(bad_keys, on=["prompt_id", "question"], how="inner")
        problems += _problems(
            rows,
            "question "
            + rows["question"].astype(str).map(repr)
            + " names no entity with a number in its prompt",
        )
    df = df.merge(
        qs.loc[~bad_q, ["prompt_id", "question", "target", "entity", "primary"]],
        on=["prompt_id", "question"],
        how="inner",
    )
    keys = ["model", "image_id", "prompt_id", "seed", "question"]
    units = mode_labels(df, keys, "value", "target", ties=ties, order="line")
    extra = df.drop_duplicates(keys).set_index(keys)[["question_id", "entity", "primary"]]
    units = units.join(extra, on=keys)
    return ScoredTask(1, _with_prompt_info(units, prompts), problems)


def _encoded(series: pd.Series, allowed: set[int]) -> tuple[np.ndarray, np.ndarray]:
    num = pd.to_numeric(
        series.astype(str).str.strip().str.lower().replace({"yes": "1", "no": "0"}), errors="coerce"
    )
    ok = num.isin(list(allowed)).to_numpy()
    return num.to_numpy(dtype=np.float64), ok


def score_task2(ann: pd.DataFrame, prompts: pd.DataFrame, ties: str = "first") -> ScoredTask:
    """Task 2 units (images): the mode of ``answer_num`` against ``gt_num`` (both on the 0-4 scale)."""
    answer, ok_a = _encoded(ann["answer_num"], {0, 1, 2, 3, 4})
    target, ok_t = _encoded(ann["gt_num"], {0, 1, 2, 3, 4})
    bad = ~(ok_a & ok_t)
    msg = np.where(
        ~ok_t,
        "gt_num " + ann["gt_num"].astype(str).map(repr) + " is not 0-4",
        "answer_num " + ann["answer_num"].astype(str).map(repr) + " is not 0-4",
    )
    problems = _problems(ann[bad], pd.Series(msg, index=ann.index))
    df = ann.assign(value=answer, target=target)[~bad]
    keys = ["model", "image_id", "prompt_id", "seed"]
    units = mode_labels(df, keys, "value", "target", ties=ties, order="line")
    return ScoredTask(2, _with_prompt_info(units, prompts), problems)


def score_task3(ann: pd.DataFrame, prompts: pd.DataFrame) -> ScoredTask:
    """Task 3 units (images): the mean of the yes/no answers, over all questions and annotators of the image."""
    answer, ok = _encoded(ann["answer"], {0, 1})
    problems = _problems(
        ann[~ok], "answer " + ann.loc[~ok, "answer"].astype(str).map(repr) + " is not 0/1 (no/yes)"
    )
    df = ann.assign(value=answer)[ok]
    keys = ["model", "image_id", "prompt_id", "seed"]
    g = df.groupby(keys, observed=True, sort=True)
    units = g["value"].agg(["mean", "size"]).rename(columns={"mean": "score", "size": "n_answers"})
    units["n_questions"] = g["question_id"].nunique()
    units = units.reset_index()
    units["correct"] = units["score"]
    return ScoredTask(3, _with_prompt_info(units, prompts), problems)


def _with_prompt_info(units: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    info = prompts[["prompt_type", "has_numeral", "is_frequent"]]
    units = units.join(info, on="prompt_id")
    units["model"] = units["model"].astype(str)
    return units


def score_annotations(
    ann: pd.DataFrame,
    prompts: pd.DataFrame,
    task: int,
    generators: Iterable[str] | None = None,
    ties: str = "first",
    ranges: str = "up",
) -> ScoredTask:
    """Check then score the rows of one task (see the module docstring)."""
    checked, problems = check_rows(ann, prompts, generators)
    problems = [ImportProblem(f, n, m) for f, n, m in ann.attrs.get("bad_rows", [])] + problems
    if task == 1:
        scored = score_task1(checked, prompts, ties, ranges)
    elif task == 2:
        scored = score_task2(checked, prompts, ties)
    elif task == 3:
        scored = score_task3(checked, prompts)
    else:
        raise ValueError(f"GeckoNum task must be 1, 2 or 3, got {task!r}")
    scored.problems = problems + scored.problems
    return scored
