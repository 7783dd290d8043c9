"""The paper's controlled comparisons of Task 1 (appendix B.1, Tables A3-A8), from scored units.

* Tables A3-A4: digits vs number words, rare vs frequent nouns, on ``numeric_simple`` prompts with numbers 1-4;
* Table A5: percentage-point drop in accuracy for the numbers 1-3 from numeric-simple to 2-additive to
  3-additive prompts;
* Tables A6-A8: numeric-simple vs attribute-color, 2-additive vs 2-additive-color, 2-additive vs
  attribute-spatial, each on the numbers 1-4 and the nouns both groups share ("We only consider prompts in both
  groups that contain the same numbers (1-4) and the same words", appendix B.1.4).

Every comparison is Pearson's chi-squared test of the 2x2 right/wrong table (no continuity correction) plus the
paper's control condition, a permutation test with the group labels shuffled. Only the first five seeds of each
image are used (``PAPER_SEEDS``): "The analyses and statistics below will be based on using five seeds for each
model" (appendix C.2); the release has ten seeds for part of Imagen-C's prompts, and seeds 0-4 are those that
reproduce its Tables A3-A4 (chi-squared 29.0 vs the paper's 27.9; seeds 5-9 give 32.6, all ten 61.5).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from countboard.metrics.numeracy import chi2_accuracy_test, permutation_chi2_test

#: Seeds of the paper's appendix analyses (the first five images of every prompt).
PAPER_SEEDS = (0, 1, 2, 3, 4)
#: Prompt numbers of the paper's controlled comparisons (Section 5.1, Tables A3-A4, A6-A8).
SMALL_NUMBERS = (1, 2, 3, 4)
#: Nouns of the paper's per-prompt-type comparison of Task 1 (Figure 3: numbers 1-4 and these words only).
CONTROLLED_NOUNS = ("apple", "cat", "koala", "mushroom", "bottle")
#: Prompt-structure comparisons: metric name, paper table, group A, group B (Tables A6-A8).
STRUCTURE_COMPARISONS = (
    ("color_simple", "A6", "numeric_simple", "attribute-color"),
    ("color_additive", "A7", "2-additive", "2-additive-color"),
    ("spatial", "A8", "2-additive", "attribute-spatial"),
)
#: Transitions of Table A5 (from, to).
ADDITIVE_TRANSITIONS = (
    ("numeric_simple", "2-additive"),
    ("2-additive", "3-additive"),
    ("numeric_simple", "3-additive"),
)
COMPARISON_COLUMNS = [
    "name", "paper_table", "group_a", "group_b", "acc_a", "acc_b", "n", "chi2", "p_value", "significant",
    "perm_p_value", "control_chi2", "control_p_value",
]  # fmt: skip


def paper_seed_units(units: pd.DataFrame) -> pd.DataFrame:
    """Units of the first five seeds (``PAPER_SEEDS``); all units when there is no ``seed`` column."""
    return units[units["seed"].isin(PAPER_SEEDS)] if "seed" in units.columns else units


def _head(units: pd.DataFrame) -> pd.Series:
    """The noun without its colour word ("black cat" -> "cat")."""
    return units["entity"].astype(str).str.split().str[-1]


def compare_groups(
    name: str, table: str, labels: tuple[str, str], a: pd.DataFrame, b: pd.DataFrame, n_perm: int, seed: int
) -> dict[str, object]:
    """One row of a comparison table: accuracies, chi-squared test and its permutation control.

    Example:
        >>> a = pd.DataFrame({"correct": [1.0] * 60 + [0.0] * 40})
        >>> b = pd.DataFrame({"correct": [1.0] * 40 + [0.0] * 60})
        >>> row = compare_groups("x", "A0", ("a", "b"), a, b, n_perm=100, seed=0)
        >>> round(row["chi2"], 2), row["significant"], row["n"]
        (8.0, True, 200)
    """
    ca, cb = a["correct"].to_numpy(dtype=float), b["correct"].to_numpy(dtype=float)
    test = chi2_accuracy_test(ca, cb)
    perm = permutation_chi2_test(ca, cb, n_perm=n_perm, seed=seed)
    return {
        "name": name, "paper_table": table, "group_a": labels[0], "group_b": labels[1],
        "acc_a": test["acc_a"], "acc_b": test["acc_b"], "n": int(ca.size + cb.size), "chi2": test["chi2"],
        "p_value": test["p_value"], "significant": bool(test["p_value"] < 0.05),
        "perm_p_value": perm["perm_p_value"], "control_chi2": perm["control_chi2"],
        "control_p_value": perm["control_p_value"],
    }  # fmt: skip


def _representation_rows(units: pd.DataFrame, n_perm: int, seed: int) -> list[dict[str, object]]:
    sub = units[(units["prompt_type"] == "numeric_simple") & units["target"].isin(SMALL_NUMBERS)]
    if sub.empty:
        return []
    words = sub["has_numeral"].astype(bool)
    return [
        compare_groups("digits_words", "A3", ("digits", "words"), sub[~words], sub[words], n_perm, seed),
        compare_groups(
            "frequent_rare", "A4", ("rare", "frequent"),
            sub[sub["is_frequent"] == 0], sub[sub["is_frequent"] == 1], n_perm, seed,
        ),
    ]  # fmt: skip


def _structure_rows(units: pd.DataFrame, n_perm: int, seed: int) -> list[dict[str, object]]:
    rows = []
    small = units[units["target"].isin(SMALL_NUMBERS)]
    head = _head(small)
    for name, table, type_a, type_b in STRUCTURE_COMPARISONS:
        in_a, in_b = small["prompt_type"] == type_a, small["prompt_type"] == type_b
        shared = set(head[in_a]) & set(head[in_b])
        if not shared:
            continue
        keep = head.isin(shared)
        rows.append(compare_groups(name, table, (type_a, type_b), small[in_a & keep], small[in_b & keep],
                                   n_perm, seed))  # fmt: skip
    return rows


def comparison_table(units: pd.DataFrame, n_perm: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Tables A3, A4 and A6-A8 of one generator's Task 1 units (first five seeds), one row per comparison.

    Columns: ``name`` (metric stem), ``paper_table``, ``group_a``/``group_b``, their accuracies ``acc_a``/``acc_b``
    (the paper's column order: digits/words, rare/frequent, without/with colour or relation), ``n``, ``chi2``,
    ``p_value``, ``significant`` (p < 0.05, the paper's "Diff?"), ``perm_p_value`` (share of label permutations
    with a statistic at least as large), ``control_chi2``/``control_p_value`` (one permuted split: the paper's
    control condition, expected not significant).
    """
    units = paper_seed_units(units)
    rows = _representation_rows(units, n_perm, seed) + _structure_rows(units, n_perm, seed)
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def comparison_metrics(table: pd.DataFrame) -> dict[str, float]:
    """Scalar metrics of ``comparison_table``: ``numeracy_<name>_{chi2,p_value,perm_p_value}`` per row, and the
    group accuracies of Tables A3-A4 (``numeracy_accuracy_{digits,words,rare,frequent}``)."""
    out: dict[str, float] = {}
    for row in table.itertuples(index=False):
        if row.name in ("digits_words", "frequent_rare"):
            out[f"numeracy_accuracy_{row.group_a}"] = float(row.acc_a)
            out[f"numeracy_accuracy_{row.group_b}"] = float(row.acc_b)
        out[f"numeracy_{row.name}_chi2"] = float(row.chi2)
        out[f"numeracy_{row.name}_p_value"] = float(row.p_value)
        out[f"numeracy_{row.name}_perm_p_value"] = float(row.perm_p_value)
    return out


def additive_drops(units: pd.DataFrame, numbers: tuple[int, ...] = (1, 2, 3)) -> pd.DataFrame:
    """Table A5: accuracy per prompt number in each additive type and the drop between types (first five seeds).

    One row per (transition, number): ``from_type``, ``to_type``, ``number``, ``acc_from``, ``acc_to``,
    ``drop_pp`` (``100 * (acc_to - acc_from)``, negative when accuracy falls), ``n_from``, ``n_to``.

    Example:
        >>> u = pd.DataFrame({"prompt_type": ["numeric_simple", "2-additive", "3-additive"] * 2,
        ...                   "target": [1, 1, 1, 2, 2, 2], "correct": [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]})
        >>> additive_drops(u, (1,))["drop_pp"].tolist()
        [0.0, -100.0, -100.0]
    """
    units = paper_seed_units(units)
    sub = units[units["target"].isin(numbers)]
    grouped = sub.groupby(["prompt_type", "target"], observed=True)["correct"]
    acc, size = grouped.mean(), grouped.size()
    rows = []
    for src, dst in ADDITIVE_TRANSITIONS:
        for number in numbers:
            a, b = acc.get((src, number), np.nan), acc.get((dst, number), np.nan)
            rows.append({"from_type": src, "to_type": dst, "number": number, "acc_from": float(a),
                         "acc_to": float(b), "drop_pp": float(100 * (b - a)),
                         "n_from": int(size.get((src, number), 0)), "n_to": int(size.get((dst, number), 0))})  # fmt: skip
    return pd.DataFrame(rows)
