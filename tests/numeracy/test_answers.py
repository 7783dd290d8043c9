"""Count-answer parsing: hand cases and agreement with the release's processed answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from countboard.numeracy.answers import TEN_PLUS, parse_count_answer, parse_count_answers
from countboard.numeracy.release import read_annotations

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0.0),
        ("3", 3.0),
        (" 7 ", 7.0),
        ("04", 4.0),
        ("2.5", 2.5),
        ("three", 3.0),
        ("Ten", 10.0),
        ("none", 0.0),
        ("10", 10.0),
        ("12", TEN_PLUS),
        ("10+", TEN_PLUS),
        ("2-3", 2.5),
        ("3-2", 2.5),
        ("2 - 4", 3.0),
        ("1--3", 2.0),
        ("6=7", 6.5),
        ("1.5-3", 2.25),
        ("8-12", 9.5),
        ("2, 10+", 2.0),
        ("1,2-3", 1.0),
        ("1Q", 1.0),
        ("2q", 2.0),
        ("0`", 0.0),
        ("1-2`", 1.5),
        ("5~", 5.0),
        ("0~+", 0.0),
        ("0-", 0.0),
        ("10=", 10.0),
        ("o", 0.0),
        (4, 4.0),
    ],
)
def test_parse_count_answer(text, value):
    assert parse_count_answer(text) == value


@pytest.mark.parametrize("text", ["", "many", "a lot", "-3", "5+", "1-2-3", "?"])
def test_unreadable_answers_raise_with_the_text(text):
    with pytest.raises(ValueError, match="cannot read"):
        parse_count_answer(text)


def test_vectorised_matches_scalar():
    texts = ["1", "2-3", "x", "10+", "x", "three"]
    values, ok = parse_count_answers(texts)
    assert ok.tolist() == [True, True, False, True, False, True]
    expect = [parse_count_answer(t) if o else np.nan for t, o in zip(texts, ok, strict=True)]
    np.testing.assert_array_equal(values, np.array(expect, dtype=float))


def test_raw_answers_reproduce_processed_column(geckonum_dir):
    root = geckonum_dir
    t1 = read_annotations(root, 1)
    raw, ok = parse_count_answers(t1["raw_answer"])
    assert ok.all()
    processed = t1["answer"].astype(str).astype(float).to_numpy()
    np.testing.assert_array_equal(raw, processed)
