"""Counts read from what a model answered in words, by one documented rule; and lmms-eval's strict convention.

``parse_count(answer, noun)`` reads an answer to "How many <noun> ...?":

- digits (``"3"``, ``"1,200"``, ``"2.5"``) and number words (``"three"``, ``"twenty-one"``, ``"a dozen"``,
  ``"a single"``); ``"no"``, ``"none"``, ``"zero"``, ``"nothing"`` and ``"not any"`` are 0;
- a range (``"3-5"``, ``"3 to 5"``, ``"between 3 and 5"``, ``"3 or 4"``) is its midpoint;
- an open answer (``"10+"``, ``"at least 10"``, ``"more than 10"``, ``"over 10"``, ``"about 10"``) is the number
  it states;
- when the answer names several numbers, the one attached to the asked noun (the number followed, within two
  words and before the next number, by the noun, singular or plural) wins; several numbers none of which is attached, with different values,
  make the answer unparsable;
- anything else (no number at all, a refusal) is unparsable: ``ParsedCount.count`` is None with the reason, and
  the caller records a failed unit with the raw answer, never a 0.

``strict_answer`` / ``strict_match`` are lmms-eval's ``countbench`` convention (``lmms_eval/tasks/countbench``):
the whole answer stripped and lower-cased, a number word of zero to twenty (or ``none``) mapped to its digits, and
an exact string match with the target's digits. ``"3"`` and ``"Three"`` match 3; ``"3."`` and ``"There are 3."``
do not.

``parse_named_count(answer, noun)`` is the rule of a judge asked an open question that names no class (the BCC
study's "What animal is shown and how many are there?"): the answer must name the class the image was meant to
show. A number attached to that noun is its count (``no``/``zero`` before it: 0); the noun named with ``a``/``an``
alone is 1; an answer
that does not name the noun at all (another animal, say) is 0 of it; the noun named with no number attached is
unparsable.

``parse_yes_no(answer)`` reads an answer to a yes/no question by the words it uses: only yes-words (``yes``,
``yeah``, ``yep``, ``true``, ``correct``) is yes, only no-words (``no``, ``nope``, ``false``, ``incorrect``; so
"There are no dogs." is no) is no; both or neither (a number, a refusal, an empty answer) is unparsable and never
read as yes (``ParsedYesNo.value`` is None with the reason).

``parse_points`` reads pointing answers (Molmo's ``<point x=".." y="..">`` and ``<points x1=.. y1=.. ...>``
tags, coordinates in percent of the image): the count is the number of points.

Example:
    >>> parse_count("There are 3 dogs and 2 cats.", "cats").count, parse_count("3-5").count
    (2.0, 4.0)
    >>> parse_count("I cannot tell.").count is None, strict_match("Three", 3), strict_match("3.", 3)
    (True, True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
          "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_ZERO_WORDS = ("none", "nothing", "no", "not any", "zero")
_PHRASES = {"a dozen": 12, "a single": 1, "only one": 1, "a hundred": 100, "one hundred": 100}

_WORD = "|".join(sorted([*_UNITS, *_TENS], key=len, reverse=True))
_NUMBER = re.compile(
    rf"(?<![\w.])(?:(?P<digits>\d{{1,3}}(?:,\d{{3}})+|\d+(?:\.\d+)?)|(?P<words>{'|'.join(_PHRASES)}|"
    rf"(?:{'|'.join(_TENS)})(?:[- ](?:{'|'.join(k for k in _UNITS if 0 < _UNITS[k] < 10)}))?|{_WORD}))(?![\w])")
_BETWEEN = re.compile(r"^\s*(?:-|–|to|or)\s*$")
_REFUSAL = re.compile(r"no idea|not sure|cannot|can't|can not|unable|don't know|do not know|impossible|unclear")


@dataclass(frozen=True)
class ParsedCount:
    """What ``parse_count`` read: ``count`` (None when unparsable), the ``rule`` applied, or the ``error``."""

    count: float | None
    rule: str = ""
    error: str | None = None


def _value(token: str) -> float:
    token = token.lower().strip()
    if token in _PHRASES:
        return float(_PHRASES[token])
    if token[0].isdigit():
        return float(token.replace(",", ""))
    parts = re.split(r"[- ]", token)
    return float(sum(_TENS.get(p, _UNITS.get(p, 0)) for p in parts))


def _singular(word: str) -> str:
    word = word.lower()
    for end, repl in (("ies", "y"), ("ves", "f"), ("ses", "s"), ("xes", "x"), ("ches", "ch"), ("shes", "sh"),
                      ("s", "")):
        if word.endswith(end) and len(word) > len(end) + 1:
            return word[: -len(end)] + repl
    return word


def _normalise(answer: str) -> str:
    text = re.sub(r"[*_`#]", " ", str(answer)).lower()
    return re.sub(r"\s+", " ", text).strip()


def _attached(text: str, noun: str) -> bool:
    """Whether the asked noun comes within two words at the start of ``text`` (what follows a number, up to the
    next number)."""
    return _contains(text, noun, within=2)


def _contains(text: str, noun: str, within: int | None = None) -> bool:
    """Whether the words of ``noun`` (singular or plural) stand in ``text``: anywhere, or within ``within`` words
    of its start."""
    target = [_singular(w) for w in re.findall(r"[a-z]+", noun.lower())]
    words = [_singular(w) for w in re.findall(r"[a-z]+", text)]
    if within is not None:
        words = words[: len(target) + within]
    return bool(target) and any(words[k:k + len(target)] == target for k in range(len(words) - len(target) + 1))


def parse_count(answer: str, noun: str | None = None) -> ParsedCount:
    """The count an answer states (module docstring: the rule), or why it states none.

    Args:
        answer: The model's raw answer.
        noun: The noun asked about (picks the number attached to it when the answer names several).
    """
    text = _normalise(answer).rstrip(".!")
    if not text:
        return ParsedCount(None, error="empty answer")
    found = list(_NUMBER.finditer(text))
    if not found:
        if _REFUSAL.search(text):
            return ParsedCount(None, error="the answer declines to count")
        if re.search(rf"(?<![\w])(?:{'|'.join(_ZERO_WORDS)})(?![\w])", text):
            return ParsedCount(0.0, rule="no / none / zero")
        return ParsedCount(None, error="no number in the answer")
    values = [_value(m[0]) for m in found]
    for k in range(len(found) - 1):
        gap = text[found[k].end():found[k + 1].start()]
        between = gap.strip() == "and" and text[:found[k].start()].rstrip().endswith("between")
        if _BETWEEN.match(gap) or between:
            return ParsedCount((values[k] + values[k + 1]) / 2, rule="range: midpoint")
    if len(set(values)) == 1:
        return ParsedCount(values[0], rule=_open_rule(text, found[0]) or "number")
    if noun:
        ends = [m.start() for m in found[1:]] + [len(text)]
        attached = [v for m, v, stop in zip(found, values, ends, strict=True) if _attached(text[m.end():stop], noun)]
        if len(set(attached)) == 1:
            return ParsedCount(attached[0], rule="number attached to the asked noun")
    return ParsedCount(None, error=f"the answer names {len(values)} different numbers, none attached to the "
                                   f"asked noun {noun!r}")


def parse_named_count(answer: str, noun: str) -> ParsedCount:
    """The count of ``noun`` in an answer to a question that did not name it (module docstring: the rule).

    Example:
        >>> [parse_named_count(a, "cats").count for a in ("There are three cats.", "A cat.", "Two dogs.")]
        [3.0, 1.0, 0.0]
    """
    text = _normalise(answer).rstrip(".!")
    if not text:
        return ParsedCount(None, error="empty answer")
    if not _contains(text, noun):
        if _REFUSAL.search(text):
            return ParsedCount(None, error="the answer declines to say")
        return ParsedCount(0.0, rule="the asked noun is not named: none of it")
    found = list(_NUMBER.finditer(text))
    ends = [m.start() for m in found[1:]] + [len(text)] * bool(found)
    attached = {_value(m[0]) for m, stop in zip(found, ends, strict=True) if _attached(text[m.end():stop], noun)}
    if len(attached) == 1:
        return ParsedCount(attached.pop(), rule="number attached to the asked noun")
    singular = " ".join(_singular(w) for w in re.findall(r"[a-z]+", text))
    last = re.escape(_singular(noun.split()[-1]))
    if not attached and re.search(rf"(?<![\w])(?:no|zero|not any)\s+(?:\w+\s+)?{last}\b", singular):
        return ParsedCount(0.0, rule="no / zero before the asked noun")
    if not attached and re.search(rf"(?<![\w])(?:a|an)\s+(?:\w+\s+)?{last}\b", singular):
        return ParsedCount(1.0, rule="the asked noun with a / an")
    return ParsedCount(None, error=f"the answer names {noun!r} without a count attached to it")


@dataclass(frozen=True)
class ParsedYesNo:
    """What ``parse_yes_no`` read: ``value`` (True for yes, False for no, None when unparsable) or the ``error``."""

    value: bool | None
    error: str | None = None


_YES = ("yes", "yeah", "yep", "true", "correct")
_NO = ("no", "nope", "false", "incorrect")


def parse_yes_no(answer: str) -> ParsedYesNo:
    """Yes, no, or why neither (module docstring: the rule).

    Example:
        >>> [parse_yes_no(a).value for a in ("Yes.", "no, there are two", "I think yes", "yes and no", "3")]
        [True, False, True, None, None]
    """
    text = _normalise(answer)
    if not text:
        return ParsedYesNo(None, error="empty answer")
    words = re.findall(r"[a-z]+", text)
    said = {w in _YES for w in words if w in _YES or w in _NO}
    if len(said) == 1:
        return ParsedYesNo(said.pop())
    return ParsedYesNo(None, error="the answer says both yes and no" if said else "neither yes nor no in the answer")


def _open_rule(text: str, match: re.Match) -> str:
    before = text[: match.start()].rstrip()
    if text[match.end():].startswith("+"):
        return "N+: N"
    if re.search(r"(?:at least|more than|over|about|around|approximately|roughly|nearly)$", before):
        return "bound or estimate: the number stated"
    return ""


NUMBER_WORDS = {**{k: str(v) for k, v in _UNITS.items()}, "twenty": "20", "none": "0"}


def strict_answer(answer: str) -> str:
    """lmms-eval ``countbench``'s normalisation: stripped, lower-cased, a number word (0-20, ``none``) as digits."""
    text = str(answer).strip().lower()
    return NUMBER_WORDS.get(text, text)


def strict_match(answer: str, target: int) -> bool:
    """lmms-eval ``countbench``'s score of one answer: its ``strict_answer`` equals the target's digits."""
    return strict_answer(answer) == strict_answer(str(int(target)))


_POINT = re.compile(r'<point\s+x="(?P<x>[\d.]+)"\s+y="(?P<y>[\d.]+)"')
_POINTS = re.compile(r"<points\s+(?P<attrs>[^>]*)>")
_ATTR = re.compile(r'(?P<axis>[xy])(?P<k>\d+)="(?P<v>[\d.]+)"')


def parse_points(answer: str) -> np.ndarray | None:
    """``(K, 2)`` points ``(x, y)`` as fractions of the image's width and height, or None when the answer has no
    point tag (a plain number). Coordinates are read in percent (Molmo's convention) and clipped to the image.

    Example:
        >>> parse_points('<points x1="10" y1="20" x2="50.5" y2="60" alt="dogs">dogs</points>').tolist()
        [[0.1, 0.2], [0.505, 0.6]]
    """
    text = str(answer)
    pts: list[tuple[float, float]] = []
    tagged = False
    for m in _POINTS.finditer(text):
        tagged = True
        coords: dict[str, dict[str, float]] = {}
        for a in _ATTR.finditer(m["attrs"]):
            coords.setdefault(a["k"], {})[a["axis"]] = float(a["v"])
        pts.extend((c["x"], c["y"]) for _, c in sorted(coords.items(), key=lambda kv: int(kv[0])) if len(c) == 2)
    for m in _POINT.finditer(text):
        tagged = True
        pts.append((float(m["x"]), float(m["y"])))
    if not tagged:
        return None
    return np.clip(np.asarray(pts, dtype=np.float64).reshape(-1, 2) / 100.0, 0.0, 1.0)
