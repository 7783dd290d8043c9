"""CountBench with a counter: each image prompted with the noun of its question; exact-count accuracy (the count
rounded to the nearest integer), MAE and RMSE, and both per ground-truth number (``tables/accuracy_per_number``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from countboard.counting.tasks.classic import ClassicCounting
from countboard.items import ImageDataset
from countboard.metrics.counting import accuracy_per_number, exact_count_accuracy
from countboard.results import RunContext, TaskResult


class CountBenchCounting(ClassicCounting):
    """The classic protocol (each image with its own class, here the question's noun) plus CountBench's metrics.

    Args:
        classes: Evaluate only the images of these nouns (default: all).
    """

    name = "countbench"

    def summarize(self, records: pd.DataFrame, model: Any, dataset: ImageDataset, ctx: RunContext) -> TaskResult:
        result = super().summarize(records, model, dataset, ctx)
        pred, gt = records["count"].to_numpy(float), records["gt"].to_numpy(float)
        result.metrics["exact_acc"] = exact_count_accuracy(pred, gt)
        result.tables["accuracy_per_number"] = pd.DataFrame(accuracy_per_number(pred, gt))
        return result
