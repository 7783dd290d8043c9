"""Human labels of texts: simulation, label files, adjudication and the annotation page's queue."""

from __future__ import annotations

import doctest

import numpy as np
import pandas as pd
import pytest

from countboard.acs import annotation as text_annotations
from countboard.acs.annotation import (
    adjudicate,
    adjudicate_simulated,
    annotation_queue,
    annotator_pair,
    append_label,
    read_label_file,
    simulate_annotations,
    text_id,
)
from countboard.errors import ConfigError

LABELS = ("positive", "neutral", "negative")


def test_docstring_examples():
    assert doctest.testmod(text_annotations).failed == 0


def test_simulated_error_rate_and_adjudication():
    rng = np.random.default_rng(0)
    truth = list(rng.choice(LABELS, 4000))
    votes = simulate_annotations(truth, LABELS, 0.1, 2, rng)
    wrong = votes != np.array(truth, dtype=object)
    assert votes.shape == (2, 4000) and abs(wrong.mean() - 0.1) < 0.015
    assert set(votes.ravel()) <= set(LABELS)
    final = adjudicate_simulated(votes, truth)
    # a final label is wrong only when both annotators pick the same wrong label: about 0.1 * 0.1 / 2
    assert np.mean([f != t for f, t in zip(final, truth, strict=True)]) < 0.015
    with pytest.raises(ConfigError, match="error_rate"):
        simulate_annotations(truth, LABELS, 1.5, 1, rng)


def test_append_read_and_adjudicate_a_label_file(tmp_path):
    path = tmp_path / "labels" / "stories.csv"
    append_label(path, "Sunny day.", "Positive", "ann1", LABELS)
    append_label(path, "Sunny day.", "positive", "ann2", LABELS)
    append_label(path, "The bus left.", "neutral", "ann1", LABELS)
    append_label(path, "The bus left.", "negative", "ann2", LABELS)
    append_label(path, "The bus left.", "neutral", "final", LABELS)
    append_label(path, "Rain, again.", "negative", "ann1", LABELS)
    append_label(path, "Rain, again.", "neutral", "ann2", LABELS)
    with path.open("a") as fh:
        fh.write("abc,ann1,furious,x\n,ann1,positive,y\n")
    rows, problems = read_label_file(path, LABELS)
    assert len(rows) == 7 and len(problems) == 2
    assert "'furious'" in problems[0] and "row 9" in problems[0] and "no text_id" in problems[1]
    final = adjudicate(rows)
    assert final.loc[text_id("Sunny day."), "label"] == "positive"
    assert final.loc[text_id("The bus left."), "label"] == "neutral"  # the final annotator decides
    assert pd.isna(final.loc[text_id("Rain, again."), "label"])  # a tie stays unlabelled
    a, b, both = annotator_pair(rows)
    assert (a, b) == ("ann1", "ann2") and len(both) == 3
    with pytest.raises(ConfigError, match="not one of"):
        append_label(path, "x", "happy", "ann1", LABELS)
    with pytest.raises(ConfigError, match="annotator"):
        append_label(path, "x", "positive", " ", LABELS)
    with pytest.raises(ConfigError, match="empty text"):
        append_label(path, "  ", "positive", "ann1", LABELS)


def test_label_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="task.human.path"):
        read_label_file(tmp_path / "none.csv", LABELS)
    bad = tmp_path / "bad.csv"
    bad.write_text("id,label\n1,positive\n")
    with pytest.raises(ConfigError, match="text_id"):
        read_label_file(bad, LABELS)


def test_annotation_queue_is_a_seeded_random_order_without_done_texts():
    samples = pd.DataFrame({"unit_id": [f"s{i}" for i in range(10)], "text": [f"Story {i}." for i in range(9)] + [""],
                            "requested": ["positive"] * 10, "prompt": ["p"] * 10})
    queue = annotation_queue(samples, seed=3)
    assert len(queue) == 9 and list(queue.columns) == ["text_id", "unit_id", "prompt", "requested", "text"]
    assert list(annotation_queue(samples, seed=3)["unit_id"]) == list(queue["unit_id"])
    assert list(annotation_queue(samples, seed=4)["unit_id"]) != list(queue["unit_id"])
    done = pd.DataFrame({"text_id": [queue["text_id"][0]], "annotator": ["ann1"], "label": ["positive"]})
    mine = annotation_queue(samples, done, annotator="ann1", seed=3, n=4)
    assert list(mine["unit_id"]) == list(queue["unit_id"][1:5])
    assert len(annotation_queue(samples, done, annotator="ann2", seed=3)) == 9
    with pytest.raises(ConfigError, match="text_acs"):
        annotation_queue(pd.DataFrame({"x": [1]}))
