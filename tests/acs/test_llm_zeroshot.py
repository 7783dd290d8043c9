"""task/classifier=llm_zeroshot: a chat causal LM as a zero-shot text classifier, on the tiny random Llama with
forced answers; label parsing, unparsable answers as failed outputs, and a text_acs cell."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from countboard.acs.models.llm_zeroshot import LlmZeroShotClassifier, parse_label
from countboard.acs.models.text_generator import build_tiny_causal_lm
from countboard.config import register_configs
from countboard.errors import ConfigError
from countboard.models.tiny_asked import force_answer
from countboard.paths import conf_dir

LABELS = ["positive", "neutral", "negative"]


@pytest.mark.parametrize(("answer", "label"), [
    ("positive", "positive"), ("Negative.", "negative"), ("Sentiment: NEUTRAL", "neutral"),
    ("The story is positive.", "positive"), ("positive or negative", "positive or negative"),
    ("I cannot say", "I cannot say"), ("non-negative", "non-negative"), ("", "")])
def test_label_parsing(answer, label):
    assert parse_label(answer, LABELS) == label


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    path = build_tiny_causal_lm(tmp_path_factory.mktemp("lm"))
    clf = LlmZeroShotClassifier(str(path), template="{text}", label_map={"happy": "positive", "sad": "negative"},
                                max_new_tokens=2, batch_size=8)
    clf.load("cpu")
    return clf


def test_forced_answers_become_labels_and_unparsable_ones_fail(classifier):
    vocab = classifier._asked.tokenizer.get_vocab()
    handle = force_answer(classifier._asked.model, [vocab["happy"], vocab["sad"], vocab["dog"]])
    try:
        out = classifier.classify(["a", "b", "c", "", "d"])
    finally:
        handle.remove()
    assert [c.label for c in out] == ["positive", "negative", None, None, "positive"]
    assert "answered 'dog dog'" in out[2].error and "empty text" in out[3].error


def test_configs_compose_and_a_missing_model_id_is_named():
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=["task=text_acs", "task/classifier=llama3_2_3b_instruct"])
    GlobalHydra.instance().clear()
    assert cfg.task.classifier.model_id == "meta-llama/Llama-3.2-3B-Instruct"
    assert "{text}" in cfg.task.classifier.template and cfg.task.classifier.name == "llama3_2_3b_instruct"
    with pytest.raises(ConfigError, match="model_id is not set"):
        LlmZeroShotClassifier(None)
    with pytest.raises(ConfigError, match="no {text}"):
        LlmZeroShotClassifier("x", template="Sentiment?")


@pytest.mark.slow
def test_a_text_acs_cell_with_the_llm_judge(tmp_path):
    import pandas as pd

    from tests.conftest import run_sweep, store_runs

    path = build_tiny_causal_lm(tmp_path / "lm")
    words = {"happy": "positive", "sad": "negative", "calm": "neutral", "good": "positive", "bad": "negative",
             "day": "neutral", "story": "neutral", "dog": "neutral", "cat": "neutral", "the": "neutral",
             "a": "neutral"}
    label_map = "{" + ",".join(f"{k}:{v}" for k, v in words.items()) + "}"
    run_sweep(["model=story_procedural_good", "task=text_acs", "task/classifier=llm_zeroshot",
               f"task.classifier.model_id={path}", f"+task.classifier.label_map={label_map}",
               "task.classifier.max_new_tokens=1", "task.human.n_labelled=10", "max_samples=40"], tmp_path)
    runs = store_runs(tmp_path / "mlruns")
    cell = runs[runs["tags.countboard.role"] == "cell"].iloc[0]
    assert cell["status"] == "FINISHED"
    art = next((tmp_path / "mlruns").glob(f"artifacts/*/{cell['run_id']}/artifacts"))
    samples = pd.read_parquet(art / "samples.parquet")
    judged = samples[samples["failed"] == 0]
    assert len(judged) and set(judged["classifier_label"]) <= {"positive", "neutral", "negative"}
    assert all("which label_map does not map" in f for f in samples.loc[samples["failed"] == 1, "failure"])
