"""Human labels of texts: simulation, label files and adjudication."""

from __future__ import annotations

import doctest

import numpy as np
import pandas as pd
import pytest

from countboard.acs import annotation as text_annotations
from countboard.acs.annotation import (
    LABEL_COLUMNS,
    adjudicate,
    adjudicate_simulated,
    annotator_pair,
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


def write_label_file(path, rows) -> None:
    """A label file as the Annotate page exports it: one row per (text, annotator, label)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"text_id": text_id(t), "annotator": a, "label": lab, "text": t} for t, a, lab in rows],
                 columns=LABEL_COLUMNS).to_csv(path, index=False)


def test_read_and_adjudicate_a_label_file(tmp_path):
    path = tmp_path / "labels" / "stories.csv"
    write_label_file(path, [("Sunny day.", "ann1", "positive"), ("Sunny day.", "ann2", "positive"),
                            ("The bus left.", "ann1", "neutral"), ("The bus left.", "ann2", "negative"),
                            ("The bus left.", "final", "neutral"), ("Rain, again.", "ann1", "negative"),
                            ("Rain, again.", "ann2", "neutral")])
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


def test_label_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="task.human.path"):
        read_label_file(tmp_path / "none.csv", LABELS)
    bad = tmp_path / "bad.csv"
    bad.write_text("id,label\n1,positive\n")
    with pytest.raises(ConfigError, match="text_id"):
        read_label_file(bad, LABELS)
