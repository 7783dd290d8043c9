"""The shared adapter of models asked in words, on tiny random LLaVA, PaliGemma and Idefics3 built here."""

from __future__ import annotations

import functools
import importlib.util
import json

import numpy as np
import pytest

from countboard.errors import ConfigError
from countboard.models.asked import AskedModel
from countboard.models.tiny_asked import ARCHS, build_tiny_vlm, force_answer

QUESTIONS = ["How many circles are in the image?", "How many cats are in the image?", "How many dogs are there?"]


@pytest.fixture(scope="module")
def tiny_vlm_dirs(tmp_path_factory):
    return {arch: build_tiny_vlm(tmp_path_factory.mktemp(f"tiny_{arch}"), arch) for arch in ARCHS}


def _images(n: int = 2):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (40 + 8 * k, 48, 3), dtype=np.uint8) for k in range(n)]


def _load(path, arch, **kw):
    plain = {"prompt": "plain", "prompt_prefix": "answer en "} if arch == "paligemma" else {}
    return AskedModel(str(path), max_new_tokens=3, **plain, **kw)


@pytest.mark.parametrize("arch", ARCHS)
def test_batched_answers_equal_one_pair_at_a_time_with_and_without_reused_features(tiny_vlm_dirs, arch):
    model = _load(tiny_vlm_dirs[arch], arch)
    assert model.reuse  # these architectures take precomputed vision features
    a, b = _images()
    images, questions = [a, a, a, b, b, b], QUESTIONS * 2
    batched = model.ask(images, questions)
    model.reuse = False
    assert model.ask(images, questions) == batched
    assert [model.ask([im], [q])[0] for im, q in zip(images, questions, strict=True)] == batched
    assert all(isinstance(x, str) and x for x in batched)


def test_image_features_are_computed_once_per_distinct_image(tiny_vlm_dirs):
    model = _load(tiny_vlm_dirs["llava"], "llava")
    calls = []
    encoder = model.encoder

    @functools.wraps(encoder)
    def counted(**kw):
        calls.append(kw["pixel_values"].shape[0])
        return encoder(**kw)

    model.encoder = counted
    a, b = _images()
    model.ask([a] * 5 + [b] * 5, QUESTIONS[:1] * 10)
    assert calls == [2]  # the two distinct images, in one call of the vision tower


def test_prompts_chat_template_or_plain_prefix(tiny_vlm_dirs):
    llava = _load(tiny_vlm_dirs["llava"], "llava")
    assert llava.use_chat and llava.format("How many?") == "<|user|> <image> How many? <|assistant|>"
    pali = _load(tiny_vlm_dirs["paligemma"], "paligemma")
    assert not pali.use_chat and pali.format("How many?") == "<image>answer en How many?"
    with pytest.raises(ConfigError, match="no chat template"):
        AskedModel(str(tiny_vlm_dirs["paligemma"]), prompt="chat")


def test_forced_answers_come_back_verbatim(tiny_vlm_dirs):
    model = _load(tiny_vlm_dirs["idefics3"], "idefics3")
    vocab = model.tokenizer.get_vocab()
    handle = force_answer(model.model, [vocab["7"], vocab["none"]])
    try:
        a, b = _images()
        assert model.ask([a, b], QUESTIONS[:2]) == ["7 7 7", "none none none"]
    finally:
        handle.remove()


def test_text_only_chat_lm(tmp_path):
    from countboard.acs.models.text_generator import build_tiny_causal_lm

    path = build_tiny_causal_lm(tmp_path / "lm")
    model = AskedModel(str(path), images=False, max_new_tokens=2, system_prompt="Answer in one word.")
    assert model.use_chat and "<|system|>" in model.format("Is it happy?")
    vocab = model.tokenizer.get_vocab()
    handle = force_answer(model.model, [vocab["happy"], vocab["sad"]])
    try:
        assert model.ask(None, ["one?", "two?", "three?"]) == ["happy happy", "sad sad", "happy happy"]
    finally:
        handle.remove()


def test_a_missing_model_and_a_missing_torchvision_say_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="model.model_id"):
        AskedModel(str(tmp_path / "nowhere"))
    folder = tmp_path / "qwen"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchvision" else real(name))
    for model_id in (str(folder), "HuggingFaceTB/SmolVLM-256M-Instruct"):
        with pytest.raises(ConfigError, match="needs torchvision") as err:
            AskedModel.preflight(model_id)
        assert "\n" not in str(err.value) and "countboard[vlm-video]" in str(err.value)
    AskedModel.preflight("llava-hf/llava-1.5-7b-hf")  # needs nothing more
