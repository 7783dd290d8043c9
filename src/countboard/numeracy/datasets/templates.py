"""The templates of GeckoNum's 12 prompt types (Table 1) as enumerable variants, and their coverage of the release.

``variants(kind, nouns, numbers)`` lists every text a template can give for the chosen nouns and numbers (each
number as a digit or a word, every sentence frame, relation, cut or colour pair); ``generate_prompts`` in
``countboard.numeracy.datasets.prompts`` draws one of them, so what is generated and what ``template_coverage`` counts are the
same set. ``template_coverage(read_prompts(...))`` gives, per type, the share of the released prompts (text and
entities) that the templates produce from vocabularies they draw from.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from countboard.errors import ConfigError

#: Table A1: nouns of Task 1, frequent and rare by word frequency.
FREQUENT_NOUNS = ("apple", "egg", "burger", "cookie", "pizza", "dog", "fish", "cat", "ant", "fly", "tree", "leaf",
                  "flower", "coconut", "olive", "table", "book", "bottle", "spoon", "pencil", "chocolate")  # fmt: skip
RARE_NOUNS = ("lychee", "parsnip", "samosa", "cinnamon stick", "axolotl", "seahorse", "kangaroo", "koala", "manatee",
              "mushroom", "durian", "bonsai", "pistachio", "okra", "crib", "paperclip", "flute", "trowel",
              "corkscrew")  # fmt: skip
#: Colours and nouns of the colour prompts (each entity its own colour), relations of the spatial prompts.
COLORS = ("black", "white", "red", "green")
COLOR_NOUNS = ("apple", "cat", "koala", "mushroom", "bottle")
RELATIONS = ("to the left of", "to the right of", "above", "below")
SENTENCE_FRAMES = ("There {verb} {num} {noun}.", "There {verb} {num} {noun} in this image.",
                   "An image showing {num} {noun}.", "A picture of {num} {noun}.")  # fmt: skip
#: Table A2: numbers of each entity of the exact types (2-additive-color's 1-8 are sums of two entities).
NUMBER_RANGES = {
    "numeric_simple": range(1, 11),
    "numeric_sentence": range(1, 6),
    "2-additive": range(1, 6),
    "3-additive": range(1, 6),
    "attribute-color": range(1, 5),
    "2-additive-color": range(1, 5),
    "attribute-spatial": range(1, 6),
    "part-whole": range(1, 6),
}
#: approx-1-entity scenes: (item, holder, preposition).
APPROX_SCENES = (("flower", "vase", "in"), ("candle", "cake", "on"), ("plate", "table", "on"), ("book", "shelf", "on"),
                 ("page", "book", "in"), ("seed", "watermelon", "in"), ("olive", "plate", "on"),
                 ("grain of rice", "table", "on"))  # fmt: skip
APPROX_1 = {"no": "no", "few": "only a few", "many": "many"}
APPROX_2 = {"fewer": "fewer {a} than {b}", "as many": "as many {a} as {b}", "more": "more {a} than {b}"}
#: fractional-simple: objects, "cut into ..." divisions, and the fractions of "<n> objects and half of another".
FRACTION_OBJECTS = ("loaf of bread", "apple", "cake", "pizza")
FRACTION_CUTS = ("thirds", "quarters", "five parts", "5 pieces", "3 slices", "4 slices", "5 slices")
FRACTIONS = {0.5: "half", 0.25: "quarter"}
PART_WHOLE_OBJECTS = ("fork", "pencil", "plate")
#: fractional-complex: objects, the verbs of the 1/3 + 2/3 template, and colour pairs of the halves template.
FRACTIONAL_COMPLEX_OBJECTS = ("pencil", "banana")
COMPLEX_CUT_VERBS = ("broken into", "is cut into")
HALF_COLOR_PAIRS = (("red", "blue"), ("orange", "black"), ("green", "yellow"), ("white", "purple"))

EXACT_TYPES = tuple(NUMBER_RANGES)
ALL_TYPES = (*EXACT_TYPES[:-1], "approx-1-entity", "approx-2-entity", "fractional-simple", "fractional-complex",
             "part-whole")  # fmt: skip
_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_IRREGULAR = {"fish": "fish", "leaf": "leaves", "loaf of bread": "loaves of bread", "grain of rice": "grains of rice",
              "shelf": "shelves", "knife": "knives"}  # fmt: skip


def plural(noun: str) -> str:
    """English plural of a noun phrase (last word inflected; a few irregular nouns listed).

    Example:
        >>> plural("fly"), plural("black koala"), plural("fish"), plural("red circle"), plural("peach")
        ('flies', 'black koalas', 'fish', 'red circles', 'peaches')
    """
    if noun in _IRREGULAR:
        return _IRREGULAR[noun]
    head, _, last = noun.rpartition(" ")
    if last in _IRREGULAR:
        word = _IRREGULAR[last]
    elif last.endswith("y") and last[-2:-1] not in "aeiou":
        word = last[:-1] + "ies"
    elif last.endswith(("s", "x", "z", "ch", "sh")):
        word = last + "es"
    else:
        word = last + "s"
    return f"{head} {word}" if head else word


@dataclass(frozen=True)
class Variant:
    """One text a template gives, its entities (``noun``, number as text) and how many numbers are words."""

    text: str
    entities: tuple[tuple[str, str], ...]
    n_words: int = 0
    n_numbers: int = 0


def _forms(n: int, capital: bool) -> list[tuple[str, int]]:
    """A number as a digit, or as a word (capitalised at the start of a sentence): (text, 1 if a word)."""
    if n > 10:
        return [(str(n), 0)]
    word = _WORDS[n].capitalize() if capital else _WORDS[n]
    return [(str(n), 0), (word, 1)]


def _counted(noun: str, n: int) -> str:
    return noun if n == 1 else plural(noun)


def _article(word: str) -> str:
    return "An" if word[0] in "aeiou" else "A"


def _exact(kind: str, nouns: Sequence[str], nums: Sequence[int]) -> list[Variant]:
    k = {"numeric_simple": 1, "attribute-color": 1, "numeric_sentence": 1, "part-whole": 1, "2-additive": 2,
         "2-additive-color": 2, "attribute-spatial": 2, "3-additive": 3}[kind]  # fmt: skip
    nouns, nums = list(nouns[:k]), [int(n) for n in nums[:k]]
    ents = tuple((x, str(n)) for x, n in zip(nouns, nums, strict=True))
    first_capital = kind in ("numeric_simple", "attribute-color", "2-additive", "2-additive-color", "3-additive")
    out = []
    for forms in itertools.product(*[_forms(n, first_capital and i == 0) for i, n in enumerate(nums)]):
        parts = [f"{t} {_counted(x, n)}" for (t, _), x, n in zip(forms, nouns, nums, strict=True)]
        words = sum(w for _, w in forms)
        verb = "is" if nums[0] == 1 else "are"
        if k == 1 and kind in ("numeric_simple", "attribute-color"):
            texts = [f"{parts[0]}."]
        elif kind == "numeric_sentence":
            texts = [f.format(verb=verb, num=forms[0][0], noun=_counted(nouns[0], nums[0])) for f in SENTENCE_FRAMES]
        elif kind == "part-whole":
            tail = "but it is broken into two pieces" if nums[0] == 1 else f"but one {nouns[0]} is broken into two pieces"
            texts = [f"There {verb} {parts[0]} on the table, {tail}."]
            words = 1  # "two pieces" is a number word
        elif kind == "3-additive":
            texts = [f"{parts[0]}, {parts[1]} and {parts[2]}."]
        elif kind == "attribute-spatial":
            texts = [f"There {verb} {parts[0]} {rel} {parts[1]}." for rel in RELATIONS]
        else:
            texts = [f"{parts[0]} and {parts[1]}."]
        out += [Variant(t, ents, words, len(nums)) for t in texts]
    return out


def _approx_1() -> list[Variant]:
    return [Variant(f"An image of a {holder}. There are {APPROX_1[key]} {plural(item)} {prep} the {holder}.",
                    ((item, key), (holder, "1")))
            for item, holder, prep in APPROX_SCENES for key in APPROX_1]  # fmt: skip


def _approx_2(nouns: Sequence[str]) -> list[Variant]:
    a, b = plural(nouns[0]), plural(nouns[1])
    return [Variant(f"An image with some {a} and some {b}. There are {APPROX_2[key].format(a=a, b=b)}.",
                    ((nouns[0], key), (nouns[1], "X"))) for key in APPROX_2]  # fmt: skip


def _fractional_simple() -> list[Variant]:
    out = []
    for obj in FRACTION_OBJECTS:
        out += [Variant(f"{_article(obj)} {obj} cut into {cut}.", ((obj, cut),)) for cut in FRACTION_CUTS]
        for whole, (frac, name) in itertools.product((1, 2, 3), FRACTIONS.items()):
            verb = "is" if whole == 1 else "are"
            text = (f"There {verb} {_WORDS[whole]} {_counted(obj, whole)} and {name} of another {obj.split()[0]} "
                    "on the table.")  # fmt: skip
            out.append(Variant(text, ((obj, f"{whole + frac:g}"),), 1, 1))
    return out


def _fractional_complex() -> list[Variant]:
    out = []
    for obj in FRACTIONAL_COMPLEX_OBJECTS:
        out += [Variant(f"A {obj} {verb} two pieces. One piece is twice the size of the other.",
                        ((obj, "1/3+2/3"),), 1, 1) for verb in COMPLEX_CUT_VERBS]  # fmt: skip
        out += [Variant(f"An image of a {obj} where one half of it is {c1} and the other half is {c2}.",
                        ((obj, f"1/2{c1}+1/2{c2}"),), 1, 1) for c1, c2 in HALF_COLOR_PAIRS]  # fmt: skip
    return out


def variants(kind: str, nouns: Sequence[str] = (), numbers: Sequence[int] = ()) -> list[Variant]:
    """Every text the template of ``kind`` gives for these nouns and numbers (the whole space where it has none).

    Example:
        >>> [v.text for v in variants("2-additive", ["cat", "dog"], [1, 3])]
        ['1 cat and 3 dogs.', '1 cat and three dogs.', 'One cat and 3 dogs.', 'One cat and three dogs.']
    """
    if kind in EXACT_TYPES:
        return _exact(kind, nouns, numbers)
    if kind == "approx-1-entity":
        return _approx_1()
    if kind == "approx-2-entity":
        return _approx_2(nouns)
    if kind == "fractional-simple":
        return _fractional_simple()
    if kind == "fractional-complex":
        return _fractional_complex()
    raise ConfigError(f"unknown prompt type {kind!r}; known: {', '.join(ALL_TYPES)}")


def noun_pool(kind: str) -> tuple[str, ...]:
    """The nouns the generator draws for ``kind`` (colour types: every colour with every colour noun)."""
    if kind in ("attribute-color", "2-additive-color"):
        return tuple(f"{c} {x}" for c in COLORS for x in COLOR_NOUNS)
    if kind == "part-whole":
        return PART_WHOLE_OBJECTS
    return FREQUENT_NOUNS + RARE_NOUNS


def _in_support(kind: str, entities: Sequence[tuple[str, str]]) -> bool:
    if kind not in EXACT_TYPES and kind != "approx-2-entity":
        return True
    pool = set(noun_pool(kind))
    if not all(noun in pool for noun, _ in entities):
        return False
    if kind == "approx-2-entity":
        return entities[0][0] != entities[1][0]
    return all(v.isdigit() and int(v) in NUMBER_RANGES[kind] for _, v in entities) and len(
        {noun for noun, _ in entities}
    ) == len(entities)


def template_coverage(prompts: pd.DataFrame) -> pd.DataFrame:
    """Per prompt type, how many released prompts (text and entities) the templates can generate.

    Args:
        prompts: ``read_prompts`` output.

    Returns:
        ``prompt_type``, ``n_released``, ``n_generated`` (released prompts among the template's variants for
        nouns and numbers the generator draws from), ``share``; one row per type, in ``ALL_TYPES`` order.
    """
    rows = []
    for kind in ALL_TYPES:
        sub = prompts[prompts["prompt_type"] == kind]
        hits = 0
        for text, ents in zip(sub["prompt"], sub["entities"], strict=True):
            ents = tuple((str(n), str(v)) for n, v in ents)
            nums = [int(v) for _, v in ents] if kind in EXACT_TYPES and all(v.isdigit() for _, v in ents) else []
            if kind in EXACT_TYPES and not nums:
                continue
            options = variants(kind, [n for n, _ in ents], nums)
            hits += _in_support(kind, ents) and any(v.text == text and v.entities == ents for v in options)
        rows.append({"prompt_type": kind, "n_released": len(sub), "n_generated": int(hits),
                     "share": hits / len(sub) if len(sub) else float("nan")})  # fmt: skip
    return pd.DataFrame(rows)
