"""Text generators: the causal-LM adapter on tiny random models, and the procedural story generator."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from countboard.acs.datasets.text_prompts import TextPrompt, TextPromptSet
from countboard.acs.models import text_generator, text_procedural
from countboard.acs.models.text_generator import (
    CausalLMGenerator,
    TinyRandomCausalLM,
    build_tiny_causal_lm,
)
from countboard.acs.models.text_procedural import SENTENCES, ProceduralStoryGenerator
from countboard.errors import ConfigError
from countboard.models.base import stable_seed

GEN = {"max_new_tokens": 8, "do_sample": True, "temperature": 1.0, "top_p": 1.0}


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_lm")
    return build_tiny_causal_lm(root / "chat", seed=1), build_tiny_causal_lm(root / "plain", chat_template=False)


@pytest.fixture(scope="module")
def prompts():
    return TextPromptSet(n_prompts=6, label_ratios={"positive": 1, "neutral": 1, "negative": 1}).items


def test_docstring_examples():
    assert doctest.testmod(text_generator).failed == 0
    assert doctest.testmod(text_procedural).failed == 0


def test_causal_lm_with_chat_template_generates_reproducibly(tiny_dirs, prompts):
    gen = CausalLMGenerator(str(tiny_dirs[0]), batch_size=4, seed=3, generation=GEN)
    assert gen.use_chat
    shown = gen.format_prompt(prompts[0].prompt)
    assert shown.startswith("<|user|>") and shown.endswith("<|assistant|>") and prompts[0].title in shown
    out = list(gen.generate(prompts))
    assert [o.prompt.prompt_id for o in out] == [p.prompt_id for p in prompts]
    assert all(isinstance(o.text, str) and o.true_label is None for o in out)
    assert all("<|user|>" not in o.text and "<pad>" not in o.text for o in out)
    assert sum(len(o.text.split()) for o in out) > 0
    again = list(CausalLMGenerator(str(tiny_dirs[0]), batch_size=4, seed=3, generation=GEN).generate(prompts))
    assert [o.text for o in again] == [o.text for o in out]
    other = list(CausalLMGenerator(str(tiny_dirs[0]), batch_size=4, seed=4, generation=GEN).generate(prompts))
    assert [o.text for o in other] != [o.text for o in out]


def test_causal_lm_without_template_uses_the_plain_prompt(tiny_dirs, prompts):
    gen = CausalLMGenerator(str(tiny_dirs[1]), batch_size=6, generation={**GEN, "do_sample": False})
    assert not gen.use_chat and gen.format_prompt("hello") == "hello"
    assert len(gen.generate_batch(prompts[:3])) == 3
    with pytest.raises(ConfigError, match="no chat template"):
        CausalLMGenerator(str(tiny_dirs[1]), chat_template=True)


def test_causal_lm_config_errors(tiny_dirs, tmp_path):
    with pytest.raises(ConfigError, match="GenerationConfig"):
        CausalLMGenerator(str(tiny_dirs[0]), generation={"max_new_tokens": -3})
    with pytest.raises(ConfigError, match="model.dtype"):
        CausalLMGenerator(str(tiny_dirs[0]), dtype="float8")
    with pytest.raises(ConfigError, match="model.model_id"):
        CausalLMGenerator(str(tmp_path / "missing"))


def test_tiny_random_causal_lm_builds_in_a_temporary_directory(prompts):
    gen = TinyRandomCausalLM(batch_size=3, generation=GEN)
    assert gen.kind == "text_generator" and len(list(gen.generate(prompts[:3]))) == 3
    assert stable_seed(0, "a") != stable_seed(0, "b")


def test_procedural_success_rate_and_truth():
    ps = TextPromptSet(n_prompts=1500, label_ratios={"positive": 35, "neutral": 30, "negative": 35})
    success = {"positive": 0.9, "neutral": 0.5, "negative": 0.8}
    gen = ProceduralStoryGenerator(success=success, miss_weights={"positive": 3, "neutral": 1, "negative": 1},
                                   seed=2)
    out = list(gen.generate(ps.items))
    hit = np.array([o.true_label == o.prompt.label for o in out])
    expected = gen.expected_success(ps.label_counts())
    assert expected == pytest.approx(0.35 * 0.9 + 0.3 * 0.5 + 0.35 * 0.8)
    assert abs(hit.mean() - expected) < 4 * np.sqrt(expected * (1 - expected) / len(out))
    neutral_misses = [o.true_label for o in out if o.prompt.label == "neutral" and o.true_label != "neutral"]
    assert neutral_misses.count("positive") > 2 * neutral_misses.count("negative")  # weights 3 : 1
    for o in out[:50]:
        assert o.prompt.title in o.text
        assert any(s.format(name=n) in o.text for s in SENTENCES[o.true_label] for n in text_procedural.NAMES)


def test_procedural_texts_do_not_depend_on_batching():
    items = [TextPrompt(f"p{i}", "x", "positive", "T") for i in range(10)]
    a = [o.text for o in ProceduralStoryGenerator(batch_size=3).generate(items)]
    b = [o.text for o in ProceduralStoryGenerator(batch_size=10).generate(items[::-1])][::-1]
    assert a == b


def test_procedural_empty_outputs_and_config_errors():
    items = [TextPrompt(f"p{i}", "x", "negative") for i in range(200)]
    out = ProceduralStoryGenerator(empty_rate=0.2).generate_batch(items)
    empty = sum(o.text == "" for o in out)
    assert 20 < empty < 60
    with pytest.raises(ConfigError, match="success.positive"):
        ProceduralStoryGenerator(success={"positive": 1.5, "neutral": 1, "negative": 1})
    with pytest.raises(ConfigError, match="one value per label"):
        ProceduralStoryGenerator(success={"positive": 1})
    with pytest.raises(ConfigError, match="word bank"):
        ProceduralStoryGenerator(labels=["toxic", "clean"])
