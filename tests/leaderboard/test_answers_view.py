"""The counters' "Answers" tab: raw answers beside the parsed counts, per image and prompted class."""

from __future__ import annotations

import pandas as pd

import sections
from countboard.schema import load_schema


def test_negative_records_become_one_row_per_prompted_class():
    samples = pd.DataFrame({"image_id": ["a", "b"], "class_name": ["cats", "dogs"], "gt": [3, 1],
                            "counts": [[3.0, 0.0], [2.0, 1.0]], "answers": [["3", "none"], ["two", "1"]]})
    rows = sections.answer_rows(samples, ["cats", "dogs"])
    assert rows[["image_id", "prompt", "count", "answer"]].values.tolist() == [
        ["a", "cats", 3.0, "3"], ["a", "dogs", 0.0, "none"], ["b", "cats", 2.0, "two"], ["b", "dogs", 1.0, "1"]]
    assert sections.answer_rows(samples, None)["prompt"].tolist()[:2] == ["prompt 1", "prompt 2"]


def test_classic_records_and_records_without_answers():
    classic = pd.DataFrame({"image_id": ["a"], "class_name": ["cats"], "gt": [3], "count": [3.0], "answer": ["3"]})
    assert sections.answer_rows(classic).columns.tolist() == ["image_id", "class_name", "gt", "count", "answer"]
    assert sections.answer_rows(classic.drop(columns="answer")) is None


def test_the_counters_family_declares_the_answers_tab():
    import family

    figs = [f for f in load_schema().families["counters"].figures if f.kind == "answers"]
    assert len(figs) == 1 and "answers" in family.DRAW and figs[0].get("samples") == "samples.parquet"


def test_one_picked_run_shows_its_answers(monkeypatch):
    import streamlit as st

    import data
    from views import runs

    samples = pd.DataFrame({"image_id": ["a"], "class_name": ["cats"], "gt": [3], "counts": [[3.0, 1.0]],
                            "answers": [["3", "one"]]})
    wide = pd.DataFrame(columns=["image_id", "class_name", "gt", "cats", "dogs"])
    tables = {("r1", "samples.parquet"): samples, ("r1", "tables/negative_counts.parquet"): wide,
              ("r2", "samples.parquet"): samples.drop(columns="answers")}
    shown = []
    monkeypatch.setattr(data, "read_table", lambda run, path: tables.get((run, path)))
    monkeypatch.setattr(st, "dataframe", lambda df, **kw: shown.append(df))
    runs.answers("r1")
    assert shown[0][["prompt", "count", "answer"]].values.tolist() == [["cats", 3.0, "3"], ["dogs", 1.0, "one"]]
    runs.answers("r2")  # counts only: nothing more is shown
    assert len(shown) == 1


def test_classic_shows_an_unparsable_answer_with_its_reason():
    classic = pd.DataFrame({"image_id": ["a", "b"], "class_name": ["cats", "cats"], "gt": [3, 2],
                            "count": [3.0, None], "answer": ["3", "I cannot tell"],
                            "parse_error": [None, "unparsable answer 'I cannot tell' (the answer declines to count)"]})
    rows = sections.answer_rows(classic)
    assert rows.columns.tolist()[-2:] == ["answer", "parse_error"] and rows["parse_error"].notna().sum() == 1
