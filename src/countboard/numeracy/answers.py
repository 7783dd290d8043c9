"""Parsing free-text count answers of human annotators (GeckoNum Task 1 and the annotation page).

Answers are numbers ("3", "2.5", "three"), ranges ("2-3"), "10+" for ten or more, or two comma-separated counts
("2, 10+": foreground, background). They are mapped to one number on GeckoNum's scale, which reproduces the
release's processed ``answer`` column:

* counts above 10 and "10+" (or "N+" with N >= 10) become 11, the "10+" bin;
* a range "a-b" becomes its midpoint ("2-3" -> 2.5, "2-4" -> 3.0), endpoints capped like single counts;
* "a, b" keeps the first (foreground) count;
* typos seen in the release are tolerated: a stray "`", "~", "=", "q" after the number, "--" or "=" as a range
  dash, the letter "o" for zero, leading zeros.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

#: The value that stands for "more than ten".
TEN_PLUS = 11.0

_WORDS = {
    "zero": 0,
    "none": 0,
    "no": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_NUM = r"(?:\d+(?:\.\d+)?|\.\d+|" + "|".join(sorted(_WORDS, key=len, reverse=True)) + r")"
_SINGLE = re.compile(rf"^({_NUM})(\+?)$")
_RANGE = re.compile(rf"^({_NUM})\s*(?:-+|=|–|to)\s*({_NUM})$")
_TRAILING_TYPO = re.compile(r"[`~=q\s]+$")


def _number(token: str) -> float:
    return float(_WORDS[token]) if token in _WORDS else float(token)


def _cap(value: float) -> float:
    return TEN_PLUS if value > 10 else value


def _parse_single(text: str) -> float | None:
    m = _SINGLE.match(text)
    if m:
        value = _number(m.group(1))
        if m.group(2):
            return TEN_PLUS if value >= 10 else None
        return _cap(value)
    m = _RANGE.match(text)
    if m:
        low, high = _cap(_number(m.group(1))), _cap(_number(m.group(2)))
        return (low + high) / 2
    return None


def parse_count_answer(text: object) -> float:
    """One annotator's count answer as a number on GeckoNum's 0-10, 11 (= "10+") scale.

    Args:
        text: The answer as typed (string or number).

    Returns:
        The count; ranges give their midpoint, so the result may be fractional.

    Raises:
        ValueError: The answer cannot be read as a count; the message quotes it.

    Example:
        >>> parse_count_answer("2-3"), parse_count_answer("10+"), parse_count_answer("2, 10+")
        (2.5, 11.0, 2.0)
        >>> parse_count_answer("Three"), parse_count_answer("1Q"), parse_count_answer("o")
        (3.0, 1.0, 0.0)
    """
    raw = str(text)
    s = raw.strip().lower()
    if "," in s:
        s = s.split(",", 1)[0].strip()
    s = _TRAILING_TYPO.sub("", s)
    if s.endswith("+") and not s.rstrip("+").strip().isdigit():
        s = s.rstrip("+")
        s = _TRAILING_TYPO.sub("", s)
    if s == "o":
        return 0.0
    if s.endswith("-") and s[:-1].strip().replace(".", "", 1).isdigit():
        s = s[:-1].strip()
    value = _parse_single(s) if s else None
    if value is None or not np.isfinite(value) or value < 0:
        raise ValueError(
            f"cannot read {raw!r} as a count (expected e.g. '3', 'three', '2-3', '10+' or '2, 10+')"
        )
    return value


def parse_count_answers(texts: Iterable[object] | pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ``parse_count_answer``: each distinct string is parsed once.

    Returns:
        ``(values, ok)``: float counts (NaN where unreadable) and a boolean mask of the readable ones.

    Example:
        >>> values, ok = parse_count_answers(["1", "2-3", "??"])
        >>> values[:2].tolist(), ok.tolist()
        ([1.0, 2.5], [True, True, False])
    """
    series = texts if isinstance(texts, pd.Series) else pd.Series(list(texts), dtype=object)
    codes, uniques = pd.factorize(
        series.astype(str) if not isinstance(series.dtype, pd.CategoricalDtype) else series
    )
    parsed = np.empty(len(uniques), dtype=np.float64)
    for i, u in enumerate(uniques):
        try:
            parsed[i] = parse_count_answer(u)
        except ValueError:
            parsed[i] = np.nan
    values = np.where(codes >= 0, parsed[np.maximum(codes, 0)], np.nan)
    return values, ~np.isnan(values)
