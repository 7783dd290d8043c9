"""Prompt sets: GeckoNum's prompts as ``PromptSpec`` and the template generator of the 12 types."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from countboard.counting.datasets.synthetic_shapes import SHAPE_CLASSES
from countboard.errors import ConfigError
from countboard.numeracy.datasets.prompts import (
    ALL_TYPES,
    COLORS,
    EXACT_TYPES,
    NUMBER_RANGES,
    from_geckonum,
    generate_prompts,
    plural,
    singular,
    to_frame,
)
from countboard.numeracy.datasets.templates import template_coverage, variants
from countboard.numeracy.release import read_prompts
from countboard.numeracy.scoring import question_target

REPO = Path(__file__).resolve().parents[2]
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


@pytest.fixture(scope="module")
def prompts(geckonum_dir):
    path = geckonum_dir
    return read_prompts(path)


def test_geckonum_prompts_as_specs(prompts):
    specs = from_geckonum(prompts)
    assert len(specs) == 1386
    exact = [s for s in specs if s.exact]
    assert len(exact) == 1260 + 15  # Task 1 types and part-whole
    assert specs[700].counts == {"corkscrew": 3, "crib": 1, "okra": 1}
    assert from_geckonum(prompts, ["attribute-spatial"])[0].prompt_type == "attribute-spatial"
    for s in exact:
        ents = [(e.noun, e.number) for e in s.entities]
        for q in s.count_questions():  # the scorer reads back the entity and the number each question asks for
            i, target = question_target(q.question, ents)
            assert target == q.target and ents[i][0] in q.nouns, q


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_every_type_fills_its_template(kind):
    specs = generate_prompts([kind], n_per_type=25, seed=3)
    assert len(specs) == 25 and {s.prompt_type for s in specs} == {kind}
    assert [s.prompt_id for s in specs] == list(range(25))
    for s in specs:
        assert s.prompt.endswith(".") and (s.prompt[0].isupper() or s.prompt[0].isdigit())
        if kind in EXACT_TYPES:
            assert s.exact
            for e in s.entities:
                assert e.count in NUMBER_RANGES[kind]
                n = e.count
                written = {str(n), WORDS[n], WORDS[n].capitalize()}
                assert any(re.search(rf"\b{w}\b", s.prompt) for w in written), s.prompt
                assert (plural(e.noun) if n != 1 else e.noun) in s.prompt
            words_used = any(re.search(rf"\b{w}\b", s.prompt.lower()) for w in WORDS[1:])
            assert s.has_numeral == words_used, s.prompt
        else:
            assert s.counts == {} and not s.exact
        if kind in ("attribute-color", "2-additive-color"):
            assert all(e.noun.split()[0] in COLORS for e in s.entities)


def test_generation_is_deterministic_and_honours_options():
    a = generate_prompts(["2-additive", "numeric_simple"], n_per_type=5, seed=7)
    b = generate_prompts(["2-additive", "numeric_simple"], n_per_type=5, seed=7)
    assert a == b
    assert generate_prompts(["numeric_simple"], n_per_type=5, seed=8) != a[5:]
    digits = generate_prompts(["numeric_simple"], n_per_type=20, words_prob=0.0, numbers=[7], seed=0)
    assert all(s.prompt.startswith("7 ") and not s.has_numeral for s in digits)
    assert {s.is_frequent for s in digits} <= {0, 1}
    shifted = generate_prompts(["numeric_simple"], n_per_type=2, first_id=100)
    assert [s.prompt_id for s in shifted] == [100, 101]
    with pytest.raises(ConfigError, match="unknown prompt type"):
        generate_prompts(["haiku"])


def test_shape_nouns_give_drawable_prompts():
    nouns = [singular(c) for c in SHAPE_CLASSES]
    assert nouns[:2] == ["red circle", "blue square"]
    assert [plural(n) for n in nouns] == list(SHAPE_CLASSES)
    specs = generate_prompts(
        ["numeric_simple", "3-additive", "attribute-spatial"], n_per_type=10, nouns=nouns
    )
    for s in specs:
        assert all(plural(noun) in SHAPE_CLASSES for noun in s.counts)
        assert len(set(s.counts)) == len(s.entities)


def test_plural_and_singular():
    for noun, pl in [("fly", "flies"), ("leaf", "leaves"), ("fish", "fish"), ("loaf of bread", "loaves of bread"),
                     ("cinnamon stick", "cinnamon sticks"), ("box", "boxes"), ("key", "keys")]:  # fmt: skip
        assert plural(noun) == pl
        assert singular(pl) == noun


def test_frame_round_trips_through_read_prompts(tmp_path):
    specs = generate_prompts(ALL_TYPES, n_per_type=2, seed=0)
    to_frame(specs).to_csv(tmp_path / "prompts.csv", index=False)
    back = from_geckonum(read_prompts(tmp_path))
    assert back == specs


def test_templates_generate_the_released_prompts(prompts):
    """Share of the released prompts of each type that the templates produce (text and entities)."""
    cov = template_coverage(prompts).set_index("prompt_type")
    assert cov["n_released"].sum() == 1386
    full = [t for t in ALL_TYPES if t not in ("attribute-spatial", "approx-1-entity")]
    assert (cov.loc[full, "share"] == 1.0).all(), cov
    # Left out on purpose, errors of the release: "There is three fish to the right of ..." (2 prompts) and
    # the entity "grains of ric" of the three grain-of-rice scenes.
    assert cov.loc["attribute-spatial", "n_generated"] == 98
    assert cov.loc["approx-1-entity", "n_generated"] == 21


def test_template_variety_beyond_one_colour_and_whole_fractions():
    colour = generate_prompts(["2-additive-color"], n_per_type=200, seed=1)
    mixed = [s for s in colour if s.entities[0].noun.split()[0] != s.entities[1].noun.split()[0]]
    same_noun = [s for s in colour if s.entities[0].noun.split()[-1] == s.entities[1].noun.split()[-1]]
    assert len(mixed) > 100 and len(same_noun) > 10
    assert all(e.count in range(1, 5) for s in colour for e in s.entities)
    fractions = {s.prompt for s in generate_prompts(["fractional-simple"], n_per_type=300, seed=2)}
    assert {"A cake cut into thirds.", "An apple cut into quarters.", "A pizza cut into 4 slices."} <= fractions
    complex_ = {s.prompt for s in generate_prompts(["fractional-complex"], n_per_type=200, seed=3)}
    assert "An image of a pencil where one half of it is red and the other half is blue." in complex_
    assert "A banana is cut into two pieces. One piece is twice the size of the other." in complex_
    assert len(complex_) == len(variants("fractional-complex")) == 12


def test_number_words_follow_words_prob():
    specs = generate_prompts(["2-additive"], n_per_type=2000, words_prob=0.3, seed=4)
    words = [s.prompt.split()[0].lower() in WORDS for s in specs]
    assert np.mean(words) == pytest.approx(0.3, abs=0.03)
