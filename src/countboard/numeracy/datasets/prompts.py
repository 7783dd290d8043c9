"""Numerical prompts for text-to-image generators: GeckoNum's set and a template generator for the 12 types.

A ``PromptSpec`` is one prompt with its entities (noun and number as in GeckoNum's ``entities`` column), the
exact counts it asks for (types of Task 1 and ``part-whole``) and one count question per entity. ``from_geckonum``
converts GeckoNum's ``prompts.csv``; ``generate_prompts`` fills the templates of the paper's Table 1 with the
words, numbers, colours and relations of its Tables A1-A2, or with any nouns given (for example the shape classes
of the synthetic dataset, which the procedural generator can draw).

Example:
    >>> specs = generate_prompts(["2-additive"], n_per_type=1, nouns=["red circle", "blue square"], seed=0)
    >>> specs[0].counts == {e.noun: int(e.number) for e in specs[0].entities}
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from countboard.errors import ConfigError
from countboard.numeracy.datasets.templates import (
    _IRREGULAR,
    ALL_TYPES,
    COLOR_NOUNS,
    COLORS,
    EXACT_TYPES,
    FREQUENT_NOUNS,
    NUMBER_RANGES,
    Variant,
    noun_pool,
    plural,
    variants,
)

__all__ = ["ALL_TYPES", "COLORS", "EXACT_TYPES", "NUMBER_RANGES", "CountQuestion", "Entity", "GeckoNumPromptSet",
           "PromptSet", "PromptSpec", "TemplatePromptSet", "from_geckonum", "generate_prompts", "plural", "singular",
           "specs_frame", "to_frame"]  # fmt: skip


def singular(noun: str) -> str:
    """Inverse of ``plural`` for the nouns used here (e.g. the shape class ``"red circles"`` -> ``"red circle"``)."""
    for s, p in _IRREGULAR.items():
        if noun == p or noun.endswith(" " + p):
            return noun[: len(noun) - len(p)] + s
    for ending, repl in (("ies", "y"), ("ches", "ch"), ("shes", "sh"), ("xes", "x"), ("ses", "s"), ("s", "")):
        if noun.endswith(ending):
            return noun[: len(noun) - len(ending)] + repl
    return noun


@dataclass(frozen=True)
class Entity:
    """A noun of a prompt and its number as written in GeckoNum's ``entities`` ("3", "few", "1.5", …)."""

    noun: str
    number: str

    @property
    def count(self) -> int | None:
        """The exact count asked for, or None (approximate quantities, fractions)."""
        return int(self.number) if self.number.isdigit() else None


@dataclass(frozen=True)
class CountQuestion:
    """One Task 1 count question: its text, the noun phrase a counter is asked for, and the number it expects.

    ``nouns`` are the entities the question covers (two for a bare noun shared by two colour entities).
    """

    question: str
    phrase: str
    target: int
    nouns: tuple[str, ...]


_INVERSE = {"to the left of": "to the right of", "to the right of": "to the left of", "above": "below",
            "below": "above"}  # fmt: skip


def _relation(prompt: str) -> str | None:
    text = prompt.lower()
    found = [r for r in _INVERSE if f" {r} " in text]
    return max(found, key=len) if found else None


@dataclass(frozen=True)
class PromptSpec:
    """One prompt with its entities; ``counts`` and ``questions`` are defined for exact types."""

    prompt_id: int
    prompt: str
    prompt_type: str
    entities: tuple[Entity, ...]
    has_numeral: bool = False
    is_frequent: int = -1

    @property
    def exact(self) -> bool:
        return self.prompt_type in EXACT_TYPES and all(e.count is not None for e in self.entities)

    @property
    def counts(self) -> dict[str, int]:
        """Noun -> count for exact prompts (empty otherwise)."""
        return {e.noun: int(e.count) for e in self.entities} if self.exact else {}

    def count_questions(self) -> list[CountQuestion]:
        """The count questions GeckoNum's Task 1 asks about this prompt, in the release's order.

        One "How many <nouns> are in the image?" per entity; colour prompts first ask the bare noun ("How many
        apples…" before "How many black apples…", once for a noun two entities share, which then expects their
        sum); spatial prompts add one relation question per entity ("How many dogs are to the left of
        coconuts?", "How many coconuts are to the right of dogs?"), which a counter answers by counting the noun.
        Empty for prompts without exact counts.
        """
        if not self.exact:
            return []
        ents = [(e.noun, int(e.count)) for e in self.entities]
        out: list[CountQuestion] = []
        colour = self.prompt_type in ("attribute-color", "2-additive-color")
        for noun, n in ents:
            head = noun.split()[-1]
            if colour and head != noun and not any(q.phrase == plural(head) for q in out):
                shared = tuple(x for x, _ in ents if x.split()[-1] == head)
                total = sum(m for x, m in ents if x in shared)
                out.append(CountQuestion(f"How many {plural(head)} are in the image?", plural(head), total, shared))
            out.append(CountQuestion(f"How many {plural(noun)} are in the image?", plural(noun), n, (noun,)))
        rel = _relation(self.prompt) if self.prompt_type == "attribute-spatial" and len(ents) == 2 else None
        if rel:
            (a, na), (b, nb) = ents
            out.append(CountQuestion(f"How many {plural(a)} are {rel} {plural(b)}?", plural(a), na, (a,)))
            out.append(CountQuestion(f"How many {plural(b)} are {_INVERSE[rel]} {plural(a)}?", plural(b), nb, (b,)))
        return out

    def questions(self) -> list[str]:
        """The text of ``count_questions`` (GeckoNum Task 1 wording)."""
        return [q.question for q in self.count_questions()]


def from_geckonum(prompts: pd.DataFrame, types: Iterable[str] | None = None) -> list[PromptSpec]:
    """``PromptSpec`` of each row of ``read_prompts`` output (optionally only some prompt types)."""
    keep = set(types) if types is not None else None
    out = []
    for pid, row in prompts.iterrows():
        if keep is not None and row["prompt_type"] not in keep:
            continue
        ents = tuple(Entity(n, v) for n, v in row["entities"])
        out.append(PromptSpec(int(pid), row["prompt"], row["prompt_type"], ents, bool(row["has_numeral"]),
                              int(row["is_frequent"])))  # fmt: skip
    return out


def to_frame(specs: Sequence[PromptSpec]) -> pd.DataFrame:
    """Prompts in GeckoNum's ``prompts.csv`` layout (``entities`` as ``noun:number`` text)."""
    return pd.DataFrame(
        {
            "index": [s.prompt_id for s in specs],
            "prompt": [s.prompt for s in specs],
            "has_numeral": [int(s.has_numeral) for s in specs],
            "is_frequent": [s.is_frequent for s in specs],
            "entities": [",".join(f"{e.noun}:{e.number}" for e in s.entities) for s in specs],
            "prompt_type": [s.prompt_type for s in specs],
            "dataset_id": [f"geckonum_{s.prompt_id:05d}" for s in specs],
        }
    )


def _nouns_for(kind: str, nouns: Sequence[str] | None, rng: np.random.Generator) -> list[str]:
    if kind == "2-additive-color" and nouns is None:
        while True:  # each entity its own colour; the same noun may come twice in two colours
            picked = [f"{COLORS[rng.integers(len(COLORS))]} {COLOR_NOUNS[rng.integers(len(COLOR_NOUNS))]}"
                      for _ in range(2)]  # fmt: skip
            if picked[0] != picked[1]:
                return picked
    pool = list(nouns) if nouns is not None else list(noun_pool(kind))
    k = min(3, len(pool))
    return [str(x) for x in rng.choice(np.asarray(pool, dtype=object), size=k, replace=False)]


def _pick(options: Sequence[Variant], rng: np.random.Generator, words_prob: float) -> Variant:
    """One variant: each number a word with probability ``words_prob``, the other choices uniform."""
    weights = np.array([words_prob ** v.n_words * (1 - words_prob) ** (v.n_numbers - v.n_words) if v.n_numbers
                        else 1.0 for v in options], dtype=np.float64)  # fmt: skip
    if weights.sum() == 0:  # words_prob 0 or 1 with no such variant (numbers above ten have no word)
        weights = np.ones(len(options))
    return options[int(rng.choice(len(options), p=weights / weights.sum()))]


def generate_prompts(
    types: Iterable[str] = ALL_TYPES,
    n_per_type: int = 10,
    nouns: Sequence[str] | None = None,
    numbers: Sequence[int] | None = None,
    words_prob: float = 0.5,
    seed: int = 0,
    first_id: int = 0,
) -> list[PromptSpec]:
    """Prompts filled into the templates of GeckoNum's Table 1, deterministic from ``seed``.

    Args:
        types: Prompt types (``ALL_TYPES``).
        n_per_type: Prompts per type.
        nouns: Singular nouns to use instead of the paper's (colour types then use them as they are, e.g. shape
            classes "red circle"); approx-1-entity, fractional types keep their own scenes.
        numbers: Numbers to draw from instead of each type's range of Table A2.
        words_prob: Probability of writing a number 0-10 as a word.
        seed: Seed of all random choices.
        first_id: ``prompt_id`` of the first prompt.
    """
    rng = np.random.default_rng(seed)
    specs: list[PromptSpec] = []
    for kind in types:
        if kind not in ALL_TYPES:
            raise ConfigError(f"unknown prompt type {kind!r}; known: {', '.join(ALL_TYPES)}")
        for _ in range(n_per_type):
            chosen = _nouns_for(kind, nouns, rng)
            nums = []
            if kind in EXACT_TYPES:
                pool = list(numbers if numbers is not None else NUMBER_RANGES[kind])
                nums = [int(x) for x in rng.choice(pool, size=3)]
            v = _pick(variants(kind, chosen, nums), rng, words_prob)
            frequent = -1
            if kind == "numeric_simple" and nouns is None:
                frequent = int(chosen[0] in FREQUENT_NOUNS)
            entities = tuple(Entity(n, str(x)) for n, x in v.entities)
            specs.append(PromptSpec(first_id + len(specs), v.text, kind, entities, v.n_words > 0, frequent))
    return specs


def specs_frame(specs: Sequence[PromptSpec]) -> pd.DataFrame:
    """Prompts in the shape ``read_prompts`` returns (index ``prompt_id``), for scoring annotations of them."""
    from countboard.numeracy.release import PROMPT_TYPES_BY_TASK

    task_of = {t: k for k, ts in PROMPT_TYPES_BY_TASK.items() for t in ts}
    return pd.DataFrame(
        {
            "prompt": [s.prompt for s in specs],
            "prompt_type": [s.prompt_type for s in specs],
            "dataset_id": [f"geckonum_{s.prompt_id:05d}" for s in specs],
            "has_numeral": [s.has_numeral for s in specs],
            "is_frequent": [s.is_frequent for s in specs],
            "entities": [[(e.noun, e.number) for e in s.entities] for s in specs],
            "task": [task_of[s.prompt_type] for s in specs],
        },
        index=pd.Index([s.prompt_id for s in specs], name="prompt_id"),
    )


class PromptSet:
    """A list of ``PromptSpec`` with lookup by id: what the generator tasks take as their dataset."""

    def __init__(self, specs: Sequence[PromptSpec]):
        ids = [s.prompt_id for s in specs]
        if len(set(ids)) != len(ids):
            raise ConfigError("prompt ids must be unique within a prompt set")
        self.specs = list(specs)
        self.by_id = {s.prompt_id: s for s in self.specs}

    def __len__(self) -> int:
        return len(self.specs)

    def frame(self) -> pd.DataFrame:
        return specs_frame(self.specs)


class GeckoNumPromptSet(PromptSet):
    """GeckoNum's ``prompts.csv`` (by default the exact-count prompts of Task 1).

    Args:
        root: Folder with ``prompts.csv`` (``${data_dir}/geckonum``).
        types: Prompt types to keep (default: the seven types of Task 1).
        max_prompts: Keep the first N prompts after filtering.
    """

    def __init__(self, root: str, types: Sequence[str] | None = None, max_prompts: int | None = None):
        from countboard.numeracy.release import PROMPT_TYPES_BY_TASK, read_prompts

        specs = from_geckonum(read_prompts(root), types if types is not None else PROMPT_TYPES_BY_TASK[1])
        super().__init__(specs[:max_prompts] if max_prompts is not None else specs)


class TemplatePromptSet(PromptSet):
    """Prompts from ``generate_prompts``; ``shape_classes=True`` uses the synthetic-shapes classes as nouns.

    Args:
        types: Prompt types.
        n_per_type: Prompts per type.
        nouns: Nouns to use (singular); default the paper's, or the shape classes.
        shape_classes: Use the first ``n_classes`` synthetic-shapes classes as nouns (drawable by the procedural
            generator).
        n_classes: How many shape classes.
        numbers: Numbers to draw from (default each type's range).
        words_prob: Probability of writing a number as a word.
        seed: Seed of the template choices.
    """

    def __init__(self, types: Sequence[str] = EXACT_TYPES[:4], n_per_type: int = 10, nouns: Sequence[str] | None = None,
                 shape_classes: bool = False, n_classes: int = 10, numbers: Sequence[int] | None = None,
                 words_prob: float = 0.5, seed: int = 0):  # fmt: skip
        if shape_classes:
            from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES

            nouns = [singular(c) for c in list(SHAPE_CLASSES)[:n_classes]]
        super().__init__(generate_prompts(types, n_per_type, nouns, numbers, words_prob, seed))
