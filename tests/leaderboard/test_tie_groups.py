"""The ranking tables' tie group column: the shared rule (``countboard.quantify.ranks.tie_groups``) per group."""

from __future__ import annotations

import pandas as pd

import ranking
import widgets
from countboard.schema import IntervalInfo, MetricInfo

ACC = MetricInfo(key="acc", display="Acc", higher_is_better=True, family="f")


def test_tie_group_column_follows_the_intervals_within_each_dataset():
    df = pd.DataFrame({"model": list("abcde"), "dataset": ["d1"] * 3 + ["d2"] * 2, "split": ["s"] * 5,
                       "acc": [0.9, 0.8, 0.3, 0.6, 0.5], "lo": [0.85, 0.7, 0.2, 0.55, 0.45],
                       "hi": [0.95, 0.86, 0.4, 0.7, 0.52], "experiment_id": ["1"] * 5, "run_id": list("vwxyz")})
    frame = widgets.ranking_frame(df, [], ACC, IntervalInfo("lo", "hi", 0.9))
    assert dict(zip(frame.model, frame["tie group"], strict=True)) == {"a": "1", "b": "1", "c": "2", "d": "1",
                                                                       "e": "2"}
    assert dict(zip(frame.model, frame["rank"], strict=True)) == {"a": "1–2", "b": "1–2", "c": "3", "d": "1",
                                                                  "e": "2"}
    assert "Chatbot Arena" in ranking.TIE_RULE


def test_without_an_interval_equal_values_share_a_tie_group():
    df = pd.DataFrame({"model": list("abc"), "dataset": ["d"] * 3, "split": ["s"] * 3, "acc": [0.9, 0.9, 0.1],
                       "experiment_id": ["1"] * 3, "run_id": list("xyz")})
    frame = widgets.ranking_frame(df, [], ACC)
    assert frame["tie group"].tolist() == ["1", "1", "2"] and frame["rank"].tolist() == ["1", "1", "3"]
