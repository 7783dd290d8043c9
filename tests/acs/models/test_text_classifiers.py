"""Text classifiers: label mapping on hand-written sentences, scores, empty texts and unknown labels."""

from __future__ import annotations

import doctest

import pytest

from countboard.acs.models import text_classifiers
from countboard.acs.models.text_classifiers import (
    LEXICON_MAP,
    EmbeddingZeroShotClassifier,
    PipelineClassifier,
    TextBlobClassifier,
    VaderClassifier,
)
from countboard.errors import ConfigError

SENTENCES = {
    "positive": ["What a wonderful, happy day! Everyone loved it.", "She was grateful and proud of her friends."],
    "neutral": ["The train left the station at noon.", "The box is on the shelf in the hallway."],
    "negative": ["It was an awful, miserable night and she cried.", "He hated the cold, dark and lonely room."],
}
TEXTS = [t for ts in SENTENCES.values() for t in ts]
TRUTH = [lab for lab, ts in SENTENCES.items() for _ in ts]


def test_docstring_examples():
    assert doctest.testmod(text_classifiers).failed == 0


@pytest.mark.parametrize("cls", [VaderClassifier, TextBlobClassifier])
def test_lexicon_classifiers_on_hand_written_sentences(cls):
    clf = cls(label_map=LEXICON_MAP)
    out = clf.classify(TEXTS)
    assert [c.label for c in out] == TRUTH
    assert [c.raw_label for c in out] == [{"positive": "pos", "neutral": "neu", "negative": "neg"}[t] for t in TRUTH]
    assert all(c.error is None and c.score is not None for c in out)
    assert out[0].score > 0 > out[-1].score


def test_vader_scores_are_mapped_and_thresholds_configured():
    out = VaderClassifier(label_map=LEXICON_MAP).classify(["A wonderful day."])[0]
    assert set(out.scores) == {"positive", "neutral", "negative"} and out.scores["positive"] > 0.5
    assert sum(out.scores.values()) == pytest.approx(1.0, abs=0.01)
    strict = VaderClassifier(label_map=LEXICON_MAP, positive_threshold=0.99, negative_threshold=-0.99)
    assert strict.classify(["A wonderful day."])[0].label == "neutral"
    with pytest.raises(ConfigError, match="must exceed"):
        VaderClassifier(positive_threshold=-0.5, negative_threshold=0.5)


def test_empty_text_and_unmapped_label_are_reported_per_item():
    clf = VaderClassifier(label_map={"pos": "positive", "neg": "negative"})  # "neu" left out on purpose
    out = clf.classify(["A wonderful day.", "", "   ", "The box is on the shelf.", "An awful day."])
    assert [c.label for c in out] == ["positive", None, None, None, "negative"]
    assert "empty text" in out[1].error and "empty text" in out[2].error
    assert "'neu'" in out[3].error and "label_map" in out[3].error and out[3].raw_label == "neu"
    with pytest.raises(ConfigError, match="happy"):
        VaderClassifier(label_map={"pos": "happy"})
    with pytest.raises(ConfigError, match="batch_size"):
        TextBlobClassifier(batch_size=0)


@pytest.mark.slow
def test_minilm_zero_shot_on_hand_written_sentences(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    clf = EmbeddingZeroShotClassifier(
        descriptions={"positive": "A happy story with a positive, joyful sentiment.",
                      "neutral": "A factual, neutral description without emotion.",
                      "negative": "A sad story with a negative, painful sentiment."},
        fallback_label="neutral", min_similarity=0.2, batch_size=4)
    out = clf.classify(TEXTS)
    assert [c.label for c in out] == TRUTH
    assert all(sum(c.scores.values()) == pytest.approx(1.0) for c in out)
    assert out[2].scores["positive"] > 0  # the fallback keeps the softmax scores
    with pytest.raises(ConfigError, match="fallback_label"):
        EmbeddingZeroShotClassifier(descriptions={"positive": "x"}, fallback_label="meh")


@pytest.fixture(scope="module")
def tiny_sentiment_model(tmp_path_factory):
    """A tiny random DistilBERT classifier whose head always prefers label id 2."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import DistilBertConfig, DistilBertForSequenceClassification, PreTrainedTokenizerFast

    words = sorted({w.strip(".,!").lower() for t in TEXTS for w in t.split()})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                  sep_token="[SEP]")
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=len(vocab), dim=16, hidden_dim=32, n_layers=1, n_heads=2,
                              max_position_embeddings=64, num_labels=4,
                              id2label={0: "NEG", 1: "NEU", 2: "POS", 3: "OTHER"},
                              label2id={"NEG": 0, "NEU": 1, "POS": 2, "OTHER": 3})
    model = DistilBertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 5.0, 1.0]))
    path = tmp_path_factory.mktemp("tiny_dss")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_pipeline_classifier_maps_model_labels(tiny_sentiment_model):
    clf = PipelineClassifier(str(tiny_sentiment_model), name="tiny_dss",
                             label_map={"NEG": "negative", "NEU": "neutral", "POS": "positive"}, batch_size=2)
    out = clf.classify(TEXTS[:3] + [""])
    assert [c.label for c in out] == ["positive"] * 3 + [None]
    first = out[0]
    assert first.raw_label == "POS" and first.score == pytest.approx(first.scores["positive"])
    assert sum(first.scores.values()) < 1.0  # the unmapped OTHER label holds the rest of the mass
    assert clf.name == "tiny_dss"


def test_pipeline_classifier_unmapped_top_label_is_an_item_error(tiny_sentiment_model):
    clf = PipelineClassifier(str(tiny_sentiment_model), label_map={"NEG": "negative", "NEU": "neutral"})
    out = clf.classify(TEXTS[:2])
    assert all(c.label is None and "'POS'" in c.error for c in out)


def test_pipeline_classifier_missing_model(tmp_path):
    clf = PipelineClassifier(str(tmp_path / "nope"), label_map={})
    with pytest.raises(ConfigError, match="model_id"):
        clf.classify(["text"])
