"""The counters table in the layout of the PrACo paper (Tables 1-2), as CSV and LaTeX, in either convention.

Columns: Negative Test (NMN, PCCN), Mosaic Test (CntP, CntR, CntF1), Classic (MAE, RMSE). One row per counter,
merged over its runs of ``praco_negative``, ``praco_mosaic``, ``classic`` and imported ``praco`` runs on one
dataset split (per metric, the most recent latest-run value). ``convention="paper"`` uses the paper's definitions;
``"released"`` the authors' released scorer (``official_*``; only CntR differs in definition). The convention is
stated in the caption, and so is the protocol of each test (``countboard.protocol``: the mosaic preset, ...): one
protocol per task, by default the default one (``task_protocols``), never two protocols of a task in one table.

Example (a leaderboard page)::

    rows = con.execute("SELECT * FROM counters").df()
    table = praco_table(rows, convention="released", split="test")
    st.download_button("CSV", table_csv(table), "praco_test.csv")
    st.download_button("LaTeX", table_latex(table, praco_caption("released", "test")), "praco_test.tex")
"""

from __future__ import annotations

import math

import pandas as pd

from countboard.escaping import csv_frame, latex
from countboard.protocol import DEFAULT_LABEL
from countboard.tracking import tags as tg

#: (group, column header, paper key, released key, format, higher is better)
COLUMNS = (
    ("Negative Test", "NMN", "nmn", "official_avg_nmn", ".2f", False),
    ("Negative Test", "PCCN", "pccn", "official_pccn", ".2f", True),
    ("Mosaic Test", "CntP", "cnt_precision", "official_avg_cnt_precision", ".3f", True),
    ("Mosaic Test", "CntR", "cnt_recall", "official_avg_cnt_recall", ".3f", True),
    ("Mosaic Test", "CntF1", "cnt_f1", "official_avg_cnt_fscore", ".3f", True),
    ("Classic", "MAE", "mae", "official_mae", ".2f", False),
    ("Classic", "RMSE", "rmse", "official_rmse", ".2f", False),
)
CONVENTIONS = ("paper", "released")
TASKS = ("praco_negative", "praco_mosaic", "classic", "praco")
_CAPTIONS = {
    "paper": "metrics as defined in the paper (Ciampi et al., Mind the Prompt)",
    "released": "metrics as the authors' released scorer (main_statistics.py) computes them: in CntR each "
                "image's own class column adds a recall of 1",
}


_TEST_NAMES = {"praco_negative": "negative test", "praco_mosaic": "mosaic test", "classic": "classic counting",
               "praco": "imported results"}
PROTOCOL_COLUMN = tg.PROTOCOL_LABEL


def praco_caption(convention: str, split: str, dataset: str = "FSC-147",
                  protocols: dict[str, str] | None = None) -> str:
    """The caption, naming the split, the convention and the protocol of every test that has not its default one.

    Example:
        >>> praco_caption("paper", "test")[:60]
        'Results on the test set of FSC-147 on both PrACo metrics (ne'
        >>> praco_caption("paper", "test", protocols={"praco_mosaic": "mosaic=official"}).split("; ")[-1]
        'protocol: mosaic test with mosaic=official, the other tests with their defaults.'
    """
    _check(convention)
    other = {t: p for t, p in (protocols or {}).items() if p != DEFAULT_LABEL}
    protocol = ("protocol: " + ", ".join(f"{_TEST_NAMES.get(t, t)} with {p}" for t, p in sorted(other.items()))
                + ", the other tests with their defaults") if other else "every test with its default protocol"
    return (f"Results on the {split} set of {dataset} on both PrACo metrics (negative and mosaic tests) and on "
            f"classic metrics; {_CAPTIONS[convention]}; {protocol}.")


def task_protocols(rows: pd.DataFrame, dataset: str = "fsc147", split: str = "test") -> dict[str, list[str]]:
    """The protocols of each task's latest runs on the dataset split, the default one first (the table's default).
    """
    if PROTOCOL_COLUMN not in rows:
        return {}
    keep = (rows["dataset"] == dataset) & (rows["split"] == split) & rows["task"].isin(TASKS)
    if "is_latest" in rows:
        keep &= rows["is_latest"].astype(bool)
    sub = rows[keep]
    labels = sub[PROTOCOL_COLUMN].fillna(DEFAULT_LABEL)
    return {task: sorted(set(labels[sub["task"] == task]), key=lambda p: (p != DEFAULT_LABEL, p))
            for task in dict.fromkeys(sub["task"])}


def _check(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: use one of {', '.join(CONVENTIONS)}")


def praco_table(rows: pd.DataFrame, convention: str = "paper", dataset: str = "fsc147",
                split: str = "test", protocols: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per counter (``Method``), one column per metric of the paper's tables, ``Source`` last.

    Args:
        rows: Rows of the ``counters`` family view (``model``, ``dataset``, ``split``, ``task``, ``end_time``,
            ``is_latest`` when present, and metric columns).
        convention: ``paper`` or ``released``.
        dataset: Dataset name to keep.
        split: Split to keep.
        protocols: The protocol (``protocol_label``) to take for each task; a task not named takes the first of
            ``task_protocols`` (the default one when it has runs).

    Returns:
        Columns ``Method``, ``NMN``, ``PCCN``, ``CntP``, ``CntR``, ``CntF1``, ``MAE``, ``RMSE``, ``Source``
        (``imported`` when a value came from an ``import-praco`` run, else ``run``); NaN where no run has the
        metric.
    """
    _check(convention)
    keep = (rows["dataset"] == dataset) & (rows["split"] == split) & rows["task"].isin(TASKS)
    if "is_latest" in rows:
        keep &= rows["is_latest"].astype(bool)
    if PROTOCOL_COLUMN in rows:
        chosen = {t: labels[0] for t, labels in task_protocols(rows, dataset, split).items()} | (protocols or {})
        keep &= rows[PROTOCOL_COLUMN].fillna(DEFAULT_LABEL) == rows["task"].map(chosen)
    sub = rows[keep].sort_values("end_time", ascending=False, na_position="last")
    out = []
    for model, group in sub.groupby("model", sort=True):
        record: dict[str, object] = {"Method": model}
        sources = set()
        for _, header, paper, released, _, _ in COLUMNS:
            key = paper if convention == "paper" else released
            value = float("nan")
            if key in group:
                found = group[group[key].notna()]
                if len(found):
                    value = float(found[key].iloc[0])
                    sources.add("imported" if found["task"].iloc[0] == "praco" else "run")
            record[header] = value
        record["Source"] = "+".join(sorted(sources)) or "-"
        out.append(record)
    return pd.DataFrame(out, columns=["Method", *(c[1] for c in COLUMNS), "Source"])


def table_csv(table: pd.DataFrame, columns=COLUMNS) -> str:
    """The table as CSV text, values as the paper prints them (2 or 3 decimals; ``columns`` as ``COLUMNS``)."""
    shown = table.copy()
    for _, header, _, _, fmt, _ in columns:
        shown[header] = [_fmt(v, fmt) for v in shown[header]]
    return csv_frame(shown, ["Method"]).to_csv(index=False)


def _fmt(value: float, fmt: str) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)



def table_latex(table: pd.DataFrame, caption: str, label: str = "tab:praco", columns=COLUMNS) -> str:
    """A booktabs ``table`` with the paper's grouped header, arrows for the direction, the caption above
    (``columns`` as ``COLUMNS``: group, header, keys, format, direction).

    Example:
        >>> t = pd.DataFrame([{"Method": "x", "NMN": 0.5, "PCCN": 90.0, "CntP": 0.7, "CntR": 0.8, "CntF1": 0.75,
        ...                    "MAE": 1.0, "RMSE": 2.0, "Source": "run"}])
        >>> "x & 0.50 & 90.00 & 0.700 & 0.800 & 0.750 & 1.00 & 2.00 \\\\\\\\" in table_latex(t, "c")
        True
    """
    groups: list[tuple[str, int]] = []
    for group, *_ in columns:
        if groups and groups[-1][0] == group:
            groups[-1] = (group, groups[-1][1] + 1)
        else:
            groups.append((group, 1))
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex(caption)}}}", rf"\label{{{label}}}",
             r"\begin{tabular}{l" + "c" * len(columns) + "}", r"\toprule"]
    lines.append(" & " + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{g}}}" for g, n in groups) + r" \\")
    start = 2
    rules = []
    for _, n in groups:
        rules.append(rf"\cmidrule(lr){{{start}-{start + n - 1}}}")
        start += n
    lines.append(" ".join(rules))
    heads = [f"{h} $\\{'uparrow' if up else 'downarrow'}$" for _, h, _, _, _, up in columns]
    lines += ["Method & " + " & ".join(heads) + r" \\", r"\midrule"]
    for _, row in table.iterrows():
        cells = [_fmt(row[h], fmt) or "--" for _, h, _, _, fmt, _ in columns]
        lines.append(latex(row["Method"]) + " & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"
