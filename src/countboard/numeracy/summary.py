"""Metrics and tables of one generator on one GeckoNum task, from its scored units.

Keys are those declared in ``countboard/schema/geckonum.yaml``. Accuracy is the mean over units (image-question
pairs for Task 1, images for Tasks 2 and 3) with the standard error of the mean and a bootstrap 95% interval;
Task 1 adds the paper's controlled comparisons (Tables A3-A8, ``geckonum_comparisons``) and the number
confusion matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from countboard.metrics.numeracy import accuracy_se, bootstrap_ci, number_confusion
from countboard.numeracy.comparisons import (
    CONTROLLED_NOUNS,
    SMALL_NUMBERS,
    additive_drops,
    comparison_metrics,
    comparison_table,
)


def controlled_units(units: pd.DataFrame) -> pd.DataFrame:
    """Task 1 units whose question asks for a number 1-4 of one of ``CONTROLLED_NOUNS`` (colour words ignored).

    Example:
        >>> u = pd.DataFrame({"target": [2, 7, 3], "entity": ["black cat", "cat", "dog"]})
        >>> controlled_units(u).index.tolist()
        [0]
    """
    head = units["entity"].astype(str).str.split().str[-1]
    return units[units["target"].isin(SMALL_NUMBERS) & head.isin(CONTROLLED_NOUNS)]


@dataclass
class Summary:
    """What one (generator, task) run logs."""

    metrics: dict[str, float]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def _accuracy_metrics(values: np.ndarray, n_boot: int, seed: int) -> dict[str, float]:
    acc, se = accuracy_se(values)
    lo, hi = bootstrap_ci(values, n_boot=n_boot, seed=seed)
    return {
        "numeracy_accuracy": acc,
        "numeracy_accuracy_se": se,
        "numeracy_accuracy_ci_low": lo,
        "numeracy_accuracy_ci_high": hi,
    }


def accuracy_table(units: pd.DataFrame, by: str, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Accuracy, SE and bootstrap interval per value of column ``by`` (e.g. ``prompt_type``).

    Example:
        >>> units = pd.DataFrame({"prompt_type": ["a", "a", "b"], "correct": [1.0, 0.0, 1.0]})
        >>> accuracy_table(units, "prompt_type")[["prompt_type", "n", "accuracy"]].values.tolist()
        [['a', 2, 0.5], ['b', 1, 1.0]]
    """
    rows = []
    for key, group in units.groupby(by, sort=True, observed=True):
        values = group["correct"].to_numpy(dtype=np.float64)
        acc, se = accuracy_se(values)
        lo, hi = bootstrap_ci(values, n_boot=n_boot, seed=seed)
        rows.append({by: key, "n": int(values.size), "accuracy": acc, "se": se, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows, columns=[by, "n", "accuracy", "se", "ci_low", "ci_high"])


def confusion_long(wide: pd.DataFrame) -> pd.DataFrame:
    """``number_confusion`` output in long form: ``prompt_number``, ``answered`` (column label), ``share``.

    Example:
        >>> wide = pd.DataFrame({"prompt_number": [1], "0": [0.25], "1": [0.75], "n": [4]})
        >>> confusion_long(wide).values.tolist()
        [[1, '0', 0.25], [1, '1', 0.75]]
    """
    long = wide.drop(columns="n").melt(id_vars="prompt_number", var_name="answered", value_name="share")
    order = {c: i for i, c in enumerate(wide.columns)}
    long["_order"] = long["answered"].map(order)
    long = long.sort_values(["prompt_number", "_order"], kind="stable").drop(columns="_order")
    return long.reset_index(drop=True)


def summarize_units(
    units: pd.DataFrame, task: int, n_boot: int = 2000, seed: int = 0, n_perm: int = 1000
) -> Summary:
    """Metrics and tables of one generator's scored units of one task (``geckonum_scoring`` output).

    ``n_perm`` is the number of label permutations of each controlled comparison's control test (Task 1).
    """
    values = units["correct"].to_numpy(dtype=np.float64)
    metrics = _accuracy_metrics(values, n_boot, seed)
    metrics["numeracy_n_units"] = float(len(units))
    metrics["numeracy_n_images"] = float(units["image_id"].nunique())
    metrics["numeracy_n_annotations"] = float(units["n_answers"].sum())
    tables = {"per_prompt_type": accuracy_table(units, "prompt_type", n_boot=n_boot, seed=seed)}
    if task in (1, 2):
        metrics["numeracy_tie_rate"] = float((units["n_modes"] > 1).mean())
    if task == 1:
        per_image = units.groupby("image_id", sort=False)["correct"].all()
        metrics["numeracy_image_accuracy"] = float(per_image.mean())
        comparisons = comparison_table(units, n_perm=n_perm, seed=seed)
        metrics |= comparison_metrics(comparisons)
        tables["paper_comparisons"] = comparisons
        tables["additive_drops"] = additive_drops(units)
        tables["per_number"] = accuracy_table(units, "target", n_boot=n_boot, seed=seed)
        tables["per_prompt_type_controlled"] = accuracy_table(
            controlled_units(units), "prompt_type", n_boot=n_boot, seed=seed
        )
        simple = units[units["prompt_type"] == "numeric_simple"]
        wide = number_confusion(simple["target"], simple["label"]).reset_index()
        tables["number_confusion"] = wide
        tables["confusion"] = confusion_long(wide)
    tables["units"] = units.reset_index(drop=True)
    return Summary(metrics, tables)


def _blue(v: float) -> tuple[int, int, int]:
    """White (0) to dark blue (1)."""
    lo, hi = np.array([247, 251, 255]), np.array([8, 48, 107])
    return tuple(int(c) for c in np.round(lo + (hi - lo) * float(np.clip(v, 0, 1))))


def confusion_figure(confusion: pd.DataFrame, title: str, cell: int = 44):
    """A heatmap (PIL image) of ``number_confusion`` output: rows are prompt numbers, columns answered counts.

    Drawn with PIL rather than matplotlib: the import renders one per generator and this takes milliseconds.
    """
    from PIL import Image, ImageDraw, ImageFont

    data = confusion.set_index("prompt_number").drop(columns="n")
    values = data.to_numpy()
    font = ImageFont.load_default(size=11)
    left, top = 60, 50
    width, height = left + cell * values.shape[1] + 10, top + cell * values.shape[0] + 45
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    draw.text((left, 8), title, fill="black", font=ImageFont.load_default(size=14))
    for (i, j), v in np.ndenumerate(values):
        x0, y0 = left + j * cell, top + i * cell
        draw.rectangle([x0, y0, x0 + cell - 1, y0 + cell - 1], fill=_blue(v), outline=(220, 220, 220))
        if v >= 0.005:
            text = f"{v:.2f}"
            color = "white" if v > 0.5 else "black"
            draw.text((x0 + cell / 2, y0 + cell / 2), text, fill=color, font=font, anchor="mm")
    for j, name in enumerate(data.columns):
        draw.text((left + j * cell + cell / 2, top + cell * values.shape[0] + 10), str(name), fill="black",
                  font=font, anchor="mt")  # fmt: skip
    for i, name in enumerate(data.index):
        draw.text((left - 8, top + i * cell + cell / 2), str(name), fill="black", font=font, anchor="rm")
    draw.text((left, height - 16), "answered count (mode of annotators, ranges rounded up)", fill="black",
              font=font)  # fmt: skip
    draw.text((4, top - 18), "prompt number", fill="black", font=font)
    return img
