"""Numeracy metrics for text-to-image generators, as in GeckoNum (Kajić et al., 2024).

Pure functions over arrays and data frames:

* ``round_answers``: fractional answers (range midpoints, "1.5") put on the integer scale, rounded up as the
  paper does (appendix C.2);
* ``mode_labels``: the label of each unit (image-question pair, image) as the mode of its annotators' answers,
  with an explicit rule for ties;
* ``accuracy_se``: mean and standard error of the mean (``s / sqrt(n)``, ``s`` with ``ddof=1``);
* ``bootstrap_ci``: percentile bootstrap interval of the mean;
* ``chi2_accuracy_test``: chi-squared test of equal accuracy in two groups (2x2 contingency table);
* ``permutation_chi2_test``: the same statistic with group labels permuted (the paper's control condition);
* ``number_confusion``: row-normalised confusion of prompt numbers against answered counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from countboard.metrics.numeracy_rules import RANGE_RULES, TIE_RULES


def round_answers(values: np.ndarray | Sequence[float], rule: str = "up") -> np.ndarray:
    """Fractional answers on the integer count scale.

    * ``"up"``: a fractional value (a range's midpoint, or a typed "1.5") is rounded up, ``ceil`` — the paper's
      "converted into an integer by rounding up the average of the two values" (appendix C.2), and its example of
      counts 2, 2, 0, 1.5, 1.5 labelled 2 (appendix B.2);
    * ``"midpoint"``: values are kept, so a winning range gives a fractional label that matches no prompt number.

    Example:
        >>> round_answers([1.5, 2.0, 2.25, 11.0]).tolist(), round_answers([1.5], "midpoint").tolist()
        ([2.0, 2.0, 3.0, 11.0], [1.5])
    """
    if rule not in RANGE_RULES:
        raise ValueError(f"ranges must be one of {RANGE_RULES}, got {rule!r}")
    x = np.asarray(values, dtype=np.float64)
    return np.ceil(x) if rule == "up" else x.copy()


def _first_given(top: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """One row per unit among its tied modes: the one whose first answer came first (``_first``)."""
    return top.sort_values(keys + ["_first", value], kind="stable").drop_duplicates(keys)


def mode_labels(
    frame: pd.DataFrame,
    keys: Sequence[str],
    value: str,
    target: str | None = None,
    ties: str = "first",
    order: str | None = None,
) -> pd.DataFrame:
    """Mode of ``value`` per group of ``keys``, and whether it equals ``target``.

    Ties (several answers given equally often) are resolved by ``ties``:

    * ``"first"``: the tied answer given first is the label (the order of ``order``, else the row order) — the
      convention of Python's ``statistics.mode``, one label per unit;
    * ``"lowest"``: the smallest tied answer is the label (``scipy.stats.mode``'s convention);
    * ``"any"``: the unit is correct when the target is one of the tied answers (the label is the target then,
      else the smallest tied answer);
    * ``"none"``: a tied unit is never correct (the label is the smallest tied answer).

    Args:
        frame: One row per answer.
        keys: Columns identifying a unit.
        value: Numeric answer column (NaN rows are ignored).
        target: Column with the unit's expected answer (constant within a unit); ``None`` to skip ``correct``.
        ties: ``"first"``, ``"lowest"``, ``"any"`` or ``"none"``.
        order: Column giving the order the answers were given in (e.g. the line in the file), for ``"first"``.

    Returns:
        One row per unit: ``keys``, ``label``, ``n_answers``, ``n_modes`` (>1 means a tie), and with ``target``
        also that column and ``correct`` (bool).

    Example:
        >>> df = pd.DataFrame({"u": [1, 1, 1, 1, 2, 2], "v": [3, 3, 2, 2, 1, 1], "t": [2, 2, 2, 2, 1, 1]})
        >>> mode_labels(df, ["u"], "v", "t")[["u", "label", "n_modes", "correct"]].values.tolist()
        [[1, 3.0, 2, False], [2, 1.0, 1, True]]
        >>> mode_labels(df, ["u"], "v", "t", ties="lowest")["correct"].tolist()
        [True, True]
    """
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {TIE_RULES}, got {ties!r}")
    keys = list(keys)
    cols = list(dict.fromkeys(keys + [value] + ([target] if target else []) + ([order] if order else [])))
    data = frame[cols].dropna(subset=[value]).copy()
    data["_pos"] = data[order].to_numpy() if order else np.arange(len(data))
    grouped_answers = data.groupby(keys + [value], observed=True, sort=True)
    counts = grouped_answers.size().rename("_n").to_frame()
    counts["_first"] = grouped_answers["_pos"].min()
    counts = counts.reset_index()
    counts["_max"] = counts.groupby(keys, observed=True, sort=False)["_n"].transform("max")
    counts["_total"] = counts.groupby(keys, observed=True, sort=False)["_n"].transform("sum")
    top = counts[counts["_n"] == counts["_max"]]
    grouped = top.groupby(keys, observed=True, sort=True)
    out = grouped[value].agg(["min", "size"]).rename(columns={"min": "label", "size": "n_modes"})
    out["n_answers"] = grouped["_total"].first()
    if ties == "first":
        out["label"] = _first_given(top, keys, value).set_index(keys)[value].reindex(out.index)
    out["label"] = out["label"].astype(float)
    if target:
        tgt = data.groupby(keys, observed=True, sort=True)[target].first()
        out[target] = tgt
        if ties == "any":
            hit = top.merge(tgt.reset_index(), on=keys, how="left")
            hit = (hit[value] == hit[target]).groupby([hit[k] for k in keys], observed=True, sort=True).any()
            out["correct"] = hit.reindex(out.index).to_numpy()
            out.loc[out["correct"], "label"] = out.loc[out["correct"], target].astype(float)
        else:
            out["correct"] = out["label"] == out[target]
            if ties == "none":
                out["correct"] &= out["n_modes"] == 1
    return out.reset_index()


def accuracy_se(values: np.ndarray | Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean, ``s / sqrt(n)`` with the sample standard deviation (``ddof=1``).

    For 0/1 outcomes this is ``sqrt(p (1 - p) / (n - 1))``; it is NaN with fewer than two values.

    Example:
        >>> accuracy_se([1, 0, 1, 1])
        (0.75, 0.25)
    """
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n == 0:
        return float("nan"), float("nan")
    mean = float(x.mean())
    se = float(x.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
    return mean, se


def bootstrap_ci(
    values: np.ndarray | Sequence[float], n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (resampling units with replacement).

    0/1 outcomes use the exact shortcut: the number of successes in a resample is ``Binomial(n, p)``.

    Example:
        >>> lo, hi = bootstrap_ci([1, 0, 1, 1, 0, 1, 1, 1], seed=0)
        >>> 0.3 < lo < 0.75 < hi <= 1.0
        True
    """
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    if np.isin(x, (0.0, 1.0)).all():
        means = rng.binomial(n, x.mean(), size=n_boot) / n
    else:
        means = np.empty(n_boot)
        chunk = max(1, 2_000_000 // n)
        for start in range(0, n_boot, chunk):
            stop = min(n_boot, start + chunk)
            means[start:stop] = x[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)


def chi2_accuracy_test(
    correct_a: np.ndarray, correct_b: np.ndarray, correction: bool = False
) -> dict[str, float]:
    """Chi-squared test that two groups have the same accuracy (2x2 table of right/wrong counts).

    Args:
        correct_a: 0/1 outcomes of group A.
        correct_b: 0/1 outcomes of group B.
        correction: Yates' continuity correction (off: GeckoNum's Tables A3-A4 are reproduced without it).

    Returns:
        ``chi2``, ``p_value``, ``acc_a``, ``acc_b`` and ``n`` (both groups). ``p_value`` is 1 (and ``chi2`` 0) when
        a column of the table is empty (everyone right or everyone wrong).

    Example:
        >>> r = chi2_accuracy_test(np.array([1] * 60 + [0] * 40), np.array([1] * 40 + [0] * 60))
        >>> round(r["chi2"], 2), round(r["p_value"], 4)
        (8.0, 0.0047)
    """
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    table = np.array([[a.sum(), (~a).sum()], [b.sum(), (~b).sum()]], dtype=np.float64)
    acc_a = float(a.mean()) if a.size else float("nan")
    acc_b = float(b.mean()) if b.size else float("nan")
    if (table.sum(axis=0) == 0).any() or (table.sum(axis=1) == 0).any():
        chi2, p = 0.0, 1.0
    else:
        expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
        diff = np.abs(table - expected)
        if correction:
            diff = diff - np.minimum(0.5, diff)
        chi2 = float((diff**2 / expected).sum())
        p = math.erfc(math.sqrt(chi2 / 2))  # survival function of chi-squared with 1 degree of freedom
    return {"chi2": chi2, "p_value": p, "acc_a": acc_a, "acc_b": acc_b, "n": float(a.size + b.size)}


def permutation_chi2_test(
    correct_a: np.ndarray, correct_b: np.ndarray, n_perm: int = 1000, seed: int = 0
) -> dict[str, float]:
    """Permutation control of ``chi2_accuracy_test``: the group labels are shuffled ``n_perm`` times.

    Appendix B of the paper: "as a control condition [...] we also conducted permutation tests where we randomly
    permuted labels between the two groups under comparison", and found no significant difference in those
    conditions. For each permutation the outcomes are re-split into groups of the original sizes and the
    chi-squared statistic recomputed.

    Returns:
        ``chi2`` (observed), ``perm_p_value`` (share of permutations with a statistic at least as large, with the
        ``(k + 1) / (n_perm + 1)`` correction), ``control_chi2`` and ``control_p_value`` (the test on one
        permuted split: what the paper reports as the control condition).

    Example:
        >>> r = permutation_chi2_test(np.array([1] * 60 + [0] * 40), np.array([1] * 40 + [0] * 60), n_perm=200)
        >>> r["perm_p_value"] < 0.05
        True
    """
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    observed = chi2_accuracy_test(a, b)["chi2"]
    pooled = np.concatenate([a, b])
    n, na, k = pooled.size, a.size, int(pooled.sum())
    rng = np.random.default_rng(seed)
    # The successes in group A of a random split are hypergeometric; the statistic depends on that count only.
    hits_a = rng.hypergeometric(k, n - k, na, size=n_perm + 1) if n and na else np.zeros(n_perm + 1, int)
    stats = _chi2_from_counts(hits_a, na, k - hits_a, n - na)
    perm_p = float((np.sum(stats[1:] >= observed - 1e-12) + 1) / (n_perm + 1))
    control = float(stats[0])
    return {
        "chi2": observed,
        "perm_p_value": perm_p,
        "control_chi2": control,
        "control_p_value": math.erfc(math.sqrt(control / 2)),
    }


def _chi2_from_counts(right_a: np.ndarray, n_a: int, right_b: np.ndarray, n_b: int) -> np.ndarray:
    """Pearson chi-squared of 2x2 right/wrong tables, vectorised over the right counts (0 for an empty margin)."""
    table = np.stack([np.stack([right_a, n_a - right_a], -1), np.stack([right_b, n_b - right_b], -1)], -2)
    table = np.asarray(table, dtype=np.float64)
    rows, cols = table.sum(axis=-1, keepdims=True), table.sum(axis=-2, keepdims=True)
    expected = rows * cols / table.sum(axis=(-2, -1), keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        terms = np.where(expected > 0, (table - expected) ** 2 / np.where(expected > 0, expected, 1), 0.0)
    empty = (rows == 0).any(axis=(-2, -1)) | (cols == 0).any(axis=(-2, -1))
    return np.where(empty, 0.0, terms.sum(axis=(-2, -1)))


def number_columns(max_number: int = 10) -> list[str]:
    """Column names of ``number_confusion``: ``0`` … ``max_number`` and ``10+`` (more than ``max_number``)."""
    return [str(i) for i in range(max_number + 1)] + [f"{max_number}+"]


def number_confusion(
    targets: np.ndarray | Sequence[float], labels: np.ndarray | Sequence[float], max_number: int = 10
) -> pd.DataFrame:
    """Row-normalised confusion matrix of prompt numbers (rows 1…``max_number``) against answered counts.

    Columns are the answered counts 0…``max_number`` and ``"10+"`` (more than ``max_number``), as in the paper's
    Figure A2. A fractional label (a range that won the vote under ``ranges="midpoint"``) is rounded up into its
    integer bin, as the paper rounds ranges (appendix C.2), so each row with data sums to 1. Rows without data
    are all zero; ``n`` holds the number of units per row.

    Example:
        >>> m = number_confusion([1, 1, 2, 2], [1, 1.5, 2, 11], max_number=2)
        >>> m.loc[1, ["1", "2"]].tolist(), m.loc[2, ["2", "2+"]].tolist(), m["n"].tolist()
        ([0.5, 0.5], [0.5, 0.5], [2, 2])
    """
    t = np.asarray(targets, dtype=np.float64)
    y = np.ceil(np.asarray(labels, dtype=np.float64))
    cols = number_columns(max_number)
    col = np.where(y > max_number, max_number + 1, y)
    keep = (t >= 1) & (t <= max_number) & (t == np.round(t)) & ~np.isnan(y)
    counts = np.zeros((max_number, len(cols)))
    np.add.at(counts, (t[keep].astype(int) - 1, col[keep].astype(int)), 1.0)
    n = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = np.where(n[:, None] > 0, counts / np.maximum(n[:, None], 1), 0.0)
    out = pd.DataFrame(norm, columns=cols, index=pd.Index(range(1, max_number + 1), name="prompt_number"))
    out["n"] = n.astype(int)
    return out
