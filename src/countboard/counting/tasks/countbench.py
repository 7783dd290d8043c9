"""CountBench with a counter: each image prompted with the noun of its question. The classic protocol's metrics
(MAE, RMSE, ``exact_accuracy`` with its interval and ``tables/accuracy_by_number``) plus the MAE per ground-truth
number (``tables/error_by_number``), CountBench's breakdown."""

from __future__ import annotations

from typing import Any

import pandas as pd

from countboard.counting.tasks.classic import ClassicCounting, parsed_records
from countboard.items import ImageDataset
from countboard.metrics.counting import error_per_number
from countboard.results import RunContext, TaskResult


class CountBenchCounting(ClassicCounting):
    """The classic protocol (each image with its own class, here the question's noun) plus CountBench's breakdown.

    Args:
        classes: Evaluate only the images of these nouns (default: all).
    """

    name = "countbench"

    def summarize(self, records: pd.DataFrame, model: Any, dataset: ImageDataset, ctx: RunContext) -> TaskResult:
        result = super().summarize(records, model, dataset, ctx)
        parsed = parsed_records(records)
        pred, gt = parsed["count"].to_numpy(float), parsed["gt"].to_numpy(float)
        result.tables["error_by_number"] = pd.DataFrame(error_per_number(pred, gt))
        return result
