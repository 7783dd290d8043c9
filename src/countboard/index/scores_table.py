"""The classic test's scores of one benchmark as a paper table (CSV and LaTeX): counts, the 2026 count errors,
detection AP and the accuracy of models asked in words under every scoring convention.

One row per model (``Method``) from its latest ``classic`` (or ``countbench``) run on the dataset split; a column
no run has is left out, so a detector table has no convention columns and a VLM table no AP. The CSV and LaTeX are
``praco_table``'s writers with these columns (group, header, key, format, direction).

Example (a leaderboard page)::

    rows = con.execute("SELECT * FROM counters").df()
    table, columns = scores_table(rows, "countbench", "test")
    st.download_button("LaTeX", table_latex(table, scores_caption("countbench", "test"), columns=columns), ...)
"""

from __future__ import annotations

import pandas as pd

#: (group, header, metric key, key again (the writers' released slot), format, higher is better)
SCORE_COLUMNS = (
    ("Counts", "MAE", "mae", "mae", ".2f", False),
    ("Counts", "RMSE", "rmse", "rmse", ".2f", False),
    ("Counts", "Acc", "exact_accuracy", "exact_accuracy", ".3f", True),
    ("Counts", "OBO", "off_by_one_acc", "off_by_one_acc", ".1f", True),
    ("Counts", "nMAE", "nmae", "nmae", ".3f", False),
    ("Counts", "sMAPE", "smape", "smape", ".2f", False),
    ("Counts", "RA@5%", "relaxed_acc_5", "relaxed_acc_5", ".1f", True),
    ("Counts", "RA@10%", "relaxed_acc_10", "relaxed_acc_10", ".1f", True),
    ("Detection", "AP", "det_ap", "det_ap", ".2f", True),
    ("Detection", "AP50", "det_ap50", "det_ap50", ".2f", True),
    ("Conventions", "lmms countbench", "conv_lmms_eval_countbench", "conv_lmms_eval_countbench", ".1f", True),
    ("Conventions", "lmms countbenchqa", "conv_lmms_eval_countbenchqa", "conv_lmms_eval_countbenchqa", ".1f", True),
    ("Conventions", "lmms pixmo_count", "conv_lmms_eval_pixmo_count", "conv_lmms_eval_pixmo_count", ".1f", True),
    ("Conventions", "lmms pixmo_count reasoning", "conv_lmms_eval_pixmo_count_reasoning",
     "conv_lmms_eval_pixmo_count_reasoning", ".1f", True),
    ("Conventions", "VLMEvalKit CountBenchQA", "conv_vlmevalkit_countbenchqa", "conv_vlmevalkit_countbenchqa",
     ".1f", True),
    ("Conventions", "VLMEvalKit TallyQA", "conv_vlmevalkit_tallyqa", "conv_vlmevalkit_tallyqa", ".1f", True),
    ("Conventions", "ours", "conv_countboard", "conv_countboard", ".1f", True),
)
TASKS = ("classic", "countbench")
#: Each benchmark the table knows: its name in print and the metric keys its publisher reports (first in its table)
BENCHMARKS = {
    "countbench": ("CountBench", ("conv_lmms_eval_countbench", "exact_accuracy")),
    "pixmo_count": ("PixMo-Count", ("conv_lmms_eval_pixmo_count", "conv_lmms_eval_pixmo_count_reasoning")),
    "tallyqa": ("TallyQA", ("conv_vlmevalkit_tallyqa",)),
    "capture": ("CAPTURe", ("smape",)),
    "fscd147": ("FSCD-147", ("mae", "rmse", "det_ap", "det_ap50")),
    "countqa": ("CountQA", ("exact_accuracy", "relaxed_acc_5", "relaxed_acc_10")),
    "mucca": ("MUCCA", ("mae", "rmse")),
    "fsc147": ("FSC-147", ("mae", "rmse")),
    "pairtally": ("PairTally", ("mae", "rmse")),
}


def scores_table(rows: pd.DataFrame, dataset: str, split: str = "test") -> tuple[pd.DataFrame, tuple]:
    """``(table, columns)``: one row per model with the ``SCORE_COLUMNS`` some run of it reports, and those columns
    (the metrics the benchmark's publisher reports first, ``BENCHMARKS``).

    Args:
        rows: Rows of the ``counters`` family view (``model``, ``dataset``, ``split``, ``task``, ``end_time``,
            ``is_latest`` when present, and metric columns).
        dataset: Dataset name to keep.
        split: Split to keep.

    Example:
        >>> rows = pd.DataFrame({"model": ["a", "b"], "dataset": "d", "split": "test", "task": "classic",
        ...                      "end_time": [1, 2], "mae": [1.0, 2.0], "det_ap": [None, 40.0]})
        >>> table, columns = scores_table(rows, "d")
        >>> table.values.tolist(), [c[1] for c in columns]
        ([['a', 1.0, nan], ['b', 2.0, 40.0]], ['MAE', 'AP'])
    """
    keep = (rows["dataset"] == dataset) & (rows["split"] == split) & rows["task"].isin(TASKS)
    if "is_latest" in rows:
        keep &= rows["is_latest"].astype(bool)
    sub = rows[keep].sort_values("end_time", ascending=False, na_position="last")
    reported = BENCHMARKS.get(dataset, ("", ()))[1]
    # the publisher's metrics first: their groups first, in each group those metrics first (groups kept whole)
    groups = list(dict.fromkeys(c[0] for c in SCORE_COLUMNS))
    first = {c[0] for c in SCORE_COLUMNS if c[2] in reported}
    ordered = sorted(SCORE_COLUMNS, key=lambda c: (c[0] not in first, groups.index(c[0]), c[2] not in reported))
    columns = tuple(c for c in ordered if c[2] in sub and sub[c[2]].notna().any())
    out = []
    for model, group in sub.groupby("model", sort=True):
        record: dict[str, object] = {"Method": model}
        for _, header, key, _, _, _ in columns:
            found = group[key].dropna()
            record[header] = float(found.iloc[0]) if len(found) else float("nan")
        out.append(record)
    return pd.DataFrame(out, columns=["Method", *(c[1] for c in columns)]), columns


def scores_caption(dataset: str, split: str) -> str:
    """The caption: the benchmark, what each group of columns follows and, for a benchmark in ``BENCHMARKS``, the
    columns its publisher reports (which the table puts first).

    Example:
        >>> scores_caption("countbench", "test")[:46]
        'Classic counting on the test set of countbench'
    """
    return (f"Classic counting on the {split} set of {dataset}: OBO is off-by-one accuracy (%), nMAE the MAE "
            "normalised by gt + 0.1, sMAPE CAPTURe's (%), RA@k CountQA's relaxed accuracy (%); AP and AP50 of the "
            "counted boxes (COCOeval, maxDets 1100); conventions: the accuracy (%) of the same answers under each "
            "harness's rule (lmms-eval, VLMEvalKit) and ours." + _reported(dataset))


def _reported(dataset: str) -> str:
    """The caption's last sentence: what the benchmark's publisher reports, for a benchmark the table knows."""
    if dataset not in BENCHMARKS:
        return ""
    name, keys = BENCHMARKS[dataset]
    headers = {c[2]: c[1] for c in SCORE_COLUMNS}
    return f" {name} reports {', '.join(headers[k] for k in keys)} (first)."
