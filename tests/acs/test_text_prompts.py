"""Controlled prompt sets: template, label ratios, prompt files and their problems."""

from __future__ import annotations

import doctest
import json

import pytest

from countboard.acs.datasets import text_prompts
from countboard.acs.datasets.text_prompts import (
    STORY_TEMPLATE,
    TextPromptSet,
    allocate,
    controlled_prompts,
    read_prompt_file,
)
from countboard.errors import ConfigError, DataNotFoundError

RATIOS = {"positive": 35, "neutral": 30, "negative": 35}


def test_docstring_examples():
    assert doctest.testmod(text_prompts).failed == 0


def test_allocate_hand_computed():
    assert allocate(100, RATIOS) == {"positive": 35, "neutral": 30, "negative": 35}
    assert allocate(7, RATIOS) == {"positive": 3, "neutral": 2, "negative": 2}  # 2.45, 2.1, 2.45: ties → earlier
    assert allocate(0, RATIOS) == {"positive": 0, "neutral": 0, "negative": 0}
    with pytest.raises(ConfigError, match="non-negative"):
        allocate(5, {"positive": -1, "negative": 2})


def test_allocate_matches_a_direct_loop():
    """Hand out items one at a time to the label furthest below its share (same rule, other algorithm)."""
    for n in range(0, 60):
        ratios = {"a": 0.35, "b": 0.3, "c": 0.35}
        want = allocate(n, ratios)
        exact = {k: n * v for k, v in ratios.items()}
        got = {k: int(exact[k]) for k in ratios}
        while sum(got.values()) < n:
            best = max(ratios, key=lambda k: (exact[k] - got[k], -list(ratios).index(k)))
            got[best] += 1
        assert want == got and sum(want.values()) == n


def test_seed_template_and_ratios():
    items = controlled_prompts(["Lemonade", "The Storm"], 100, RATIOS, seed=3)
    assert len(items) == 100 and len({p.prompt_id for p in items}) == 100
    assert sum(p.label == "neutral" for p in items) == 30
    first = items[0]
    assert first.prompt == STORY_TEMPLATE.format(title=first.title, label=first.label)
    assert f'title: "{first.title}"' in first.prompt and f'have a "{first.label}" sentiment' in first.prompt
    assert {p.title for p in items} == {"Lemonade", "The Storm"}
    again = controlled_prompts(["Lemonade", "The Storm"], 100, RATIOS, seed=3)
    assert [p.prompt for p in again] == [p.prompt for p in items]
    other = controlled_prompts(["Lemonade", "The Storm"], 100, RATIOS, seed=4)
    assert [p.label for p in other] != [p.label for p in items]


def test_prompt_set_defaults_and_titles_file(tmp_path):
    ps = TextPromptSet(n_prompts=40, label_ratios=RATIOS)
    assert ps.label_counts() == {"positive": 14, "neutral": 12, "negative": 14}
    assert len(set(p.title for p in ps.items)) == 40  # fewer prompts than titles: no title repeats
    titles = tmp_path / "titles.txt"
    titles.write_text("Alpha\n\nBeta\n")
    ps = TextPromptSet(n_prompts=4, titles_file=str(titles))
    assert {p.title for p in ps.items} == {"Alpha", "Beta"}
    assert ps[ps.ids()[0]] is ps.items[0]
    with pytest.raises(ConfigError, match="happy"):
        TextPromptSet(label_ratios={"happy": 1})
    with pytest.raises(DataNotFoundError, match="titles_file"):
        TextPromptSet(titles_file=str(tmp_path / "nope.txt"))


def test_prompt_file_keeps_labels_and_reports_problems(tmp_path):
    path = tmp_path / "prompts.csv"
    path.write_text("id,title,prompt,label\n"
                    "a,Lemonade,,Positive\n"
                    "b,,Tell me a sad story.,negative\n"
                    "c,Rain,,ecstatic\n"
                    "d,,,neutral\n"
                    "e,Snow,,\n")
    ps = TextPromptSet(prompt_file=str(path))
    assert ps.ids() == ["a", "b", "c", "d", "e"]
    assert ps["a"].label == "positive" and 'title: "Lemonade"' in ps["a"].prompt
    assert ps["b"].prompt == "Tell me a sad story." and ps["b"].label == "negative"
    assert ps["c"].label == "ecstatic"  # kept as requested, reported
    assert set(ps.problems) == {"c", "d", "e"}
    assert "ecstatic" in ps.problems["c"] and "neither a prompt nor a title" in ps.problems["d"]
    assert "no label" in ps.problems["e"]


def test_jsonl_prompt_file_and_errors(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "A happy tale.", "label": "positive"}) + "\n\n"
                    + json.dumps({"title": "Fog", "label": "neutral"}) + "\n")
    items, problems = read_prompt_file(path, ["positive", "neutral", "negative"], template="{title}/{label}")
    assert [p.prompt for p in items] == ["A happy tale.", "Fog/neutral"] and problems == {}
    assert items[0].prompt_id == "prompt_00000"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n")
    with pytest.raises(ConfigError, match="bad.jsonl:1"):
        read_prompt_file(bad, ["positive"])
    dup = tmp_path / "dup.csv"
    dup.write_text("id,prompt,label\nx,a,positive\nx,b,positive\n")
    with pytest.raises(ConfigError, match="twice"):
        read_prompt_file(dup, ["positive"])
    txt = tmp_path / "prompts.txt"
    txt.write_text("a happy story")
    with pytest.raises(ConfigError, match=".csv or .jsonl"):
        read_prompt_file(txt, ["positive"])
