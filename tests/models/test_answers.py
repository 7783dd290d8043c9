"""The answer parser on a table of answer shapes models give, lmms-eval's strict convention, and point tags."""

from __future__ import annotations

import math

import numpy as np
import pytest

from countboard.models.answers import (
    parse_count,
    parse_named_count,
    parse_points,
    parse_yes_no,
    strict_answer,
    strict_match,
)

#: (answer, asked noun, count or None for unparsable, rule or error fragment)
ANSWERS = [
    ("3", "dogs", 3, "number"),
    ("3.", "dogs", 3, "number"),
    ("Three.", "dogs", 3, "number"),
    ("**4**", "apples", 4, "number"),
    ("There are 7 apples in the image.", "apples", 7, "number"),
    ("The image shows twelve birds.", "birds", 12, "number"),
    ("twenty-one", "cars", 21, "number"),
    ("forty two", "cars", 42, "number"),
    ("1,200", "grains", 1200, "number"),
    ("a dozen eggs", "eggs", 12, "number"),
    ("There is a single bird.", "birds", 1, "number"),
    ("one hundred", "sheep", 100, "number"),
    ("There is one cat and one dog.", "cats", 1, "number"),
    ("No", "zebras", 0, "no / none / zero"),
    ("None.", "zebras", 0, "no / none / zero"),
    ("There are no zebras in the image.", "zebras", 0, "no / none / zero"),
    ("zero", "zebras", 0, "number"),
    ("0", "zebras", 0, "number"),
    ("3-5", "cups", 4, "range: midpoint"),
    ("3 to 5 cups", "cups", 4, "range: midpoint"),
    ("between 10 and 20 people", "people", 15, "range: midpoint"),
    ("3 or 4", "cups", 3.5, "range: midpoint"),
    ("10+", "people", 10, "N+: N"),
    ("at least 10", "people", 10, "bound or estimate"),
    ("more than 50 birds", "birds", 50, "bound or estimate"),
    ("about 30", "birds", 30, "bound or estimate"),
    ("There are 3 dogs and 2 cats.", "cats", 2, "attached to the asked noun"),
    ("There are 3 dogs and 2 cats.", "dogs", 3, "attached to the asked noun"),
    ("I see 2 cats, 3 dogs", "dog", 3, "attached to the asked noun"),
    ("There are 3 dogs and 2 cats.", "birds", None, "none attached"),
    ("I count 4 red apples and 1 green apple", "apples", None, "different numbers"),
    ("I have no idea.", "apples", None, "declines"),
    ("I cannot tell from this image.", "apples", None, "declines"),
    ("apples", "apples", None, "no number"),
    ("", "apples", None, "empty"),
]


@pytest.mark.parametrize(("answer", "noun", "count", "why"), ANSWERS)
def test_answer_shapes(answer, noun, count, why):
    parsed = parse_count(answer, noun)
    if count is None:
        assert parsed.count is None and why in parsed.error
    else:
        assert parsed.count == pytest.approx(count) and why in parsed.rule and parsed.error is None


def test_an_unparsable_answer_is_never_zero():
    assert all(parse_count(a, n).count is None for a, n, c, _ in ANSWERS if c is None)


@pytest.mark.parametrize(("answer", "target", "strict", "parsed_right"), [
    ("3", 3, True, True), ("Three", 3, True, True), (" THREE ", 3, True, True), ("none", 0, True, True),
    ("zero", 0, True, True), ("twenty", 20, True, True), ("3.", 3, False, True),
    ("There are 3 dogs.", 3, False, True), ("twenty-one", 21, False, True), ("4", 3, False, False)])
def test_strict_convention_beside_the_parsed_count(answer, target, strict, parsed_right):
    assert strict_match(answer, target) is strict
    assert (parse_count(answer, "dogs").count == target) is parsed_right


def test_strict_answer_maps_whole_number_words_only():
    assert strict_answer("Seven") == "7" and strict_answer("seven cats") == "seven cats"


def test_points():
    pts = parse_points('<point x="25" y="50" alt="dog">dog</point> and <point x="100.0" y="0" alt="dog">dog</point>')
    assert pts.tolist() == [[0.25, 0.5], [1.0, 0.0]]
    many = parse_points('<points x1="10" y1="20" x2="30" y2="40" x3="50" y3="60" alt="cats">cats</points>')
    assert len(many) == 3 and many[2].tolist() == [0.5, 0.6]
    assert parse_points("There are 3 cats.") is None
    assert len(parse_points('<points alt="cats">cats</points>')) == 0
    assert np.all((many >= 0) & (many <= 1)) and not math.isnan(float(many.sum()))


#: The BCC study's judge, asked "What animal is shown and how many are there?": (answer, class the image was meant
#: to show, count of it or None for unparsable)
NAMED = [
    ("There are three cats in the image.", "cats", 3),
    ("The image shows 2 dogs and 3 cats.", "cats", 3),
    ("A cat.", "cats", 1),
    ("An orange cat and two dogs.", "cats", 1),
    ("There is one cat.", "cats", 1),
    ("A polar bear on the ice.", "polar bears", 1),
    ("Two polar bears.", "polar bears", 2),
    ("Two dogs.", "cats", 0),  # another animal: none of the asked one
    ("Three kittens.", "cats", 0),  # the rule reads the class's own name, not a synonym
    ("No cats, only a dog.", "cats", 0),
    ("Cats.", "cats", None),  # named, but no count attached
    ("I cannot tell what animal this is.", "cats", None),
    ("", "cats", None),
]


@pytest.mark.parametrize(("answer", "noun", "count"), NAMED)
def test_named_count_reads_the_asked_class_from_an_open_answer(answer, noun, count):
    parsed = parse_named_count(answer, noun)
    assert parsed.count == count, (answer, parsed)
    assert (parsed.error is None) == (count is not None)


@pytest.mark.parametrize(("answer", "value"), [
    ("Yes", True), ("yes.", True), ("Yeah, there is one.", True), ("No", False), ("There are no dogs.", False),
    ("nope", False), ("3", None), ("", None), ("yes and no", None), ("I cannot tell.", None)])
def test_yes_no_answers_are_read_by_their_words_and_never_guessed(answer, value):
    parsed = parse_yes_no(answer)
    assert parsed.value is value
    assert (parsed.error is None) == (value is not None)
