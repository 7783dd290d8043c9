"""GeckoNum's Table 3 from ``geckonum_autometrics`` runs: ✓ where a metric tells correct from incorrect images.

One row per generator (the run's ``model``), one column per auto-eval metric that some run reported (the paper's
order: CLIP, TIFA, DSG, then the counter score): ✓ where the Mann–Whitney p-value is below 0.05, ``=`` where it is
not (the paper's marks), from each generator's most recent run. ``auroc_ranking``
ranks the metrics of each generator by AUROC with its interval. Both come as CSV and LaTeX like the PrACo table.

Example (a leaderboard page)::

    rows = con.execute("SELECT * FROM generator_autometrics").df()
    st.download_button("LaTeX", table3_latex(table3(rows)), "geckonum_table3.tex")
"""

from __future__ import annotations

import pandas as pd

from countboard.escaping import csv_frame, latex

#: (metric key in the schema, column header), in Table 3's order
METRICS = (("clipscore", "CLIP"), ("tifa", "TIFA"), ("dsg", "DSG"), ("counter", "Counter"))
SIGNIFICANCE = 0.05
CHECK, NOT = "✓", "="


def _latest(rows: pd.DataFrame) -> pd.DataFrame:
    if "is_latest" in rows:  # the index's most recent complete run of each entry
        rows = rows[rows["is_latest"].fillna(False).astype(bool)]
    order = "start_time" if "start_time" in rows else None
    rows = rows.sort_values(order, ascending=False) if order else rows
    return rows.drop_duplicates("model")


def table3(rows: pd.DataFrame) -> pd.DataFrame:
    """Generators × metrics with ✓ (p < 0.05) or = ; a metric a run did not report is left empty, and a metric no
    run reported has no column.

    Example:
        >>> rows = pd.DataFrame({"model": ["muse_b"], "autometrics_clipscore_p_value": [0.2],
        ...                      "autometrics_counter_p_value": [0.001]})
        >>> table3(rows).values.tolist()
        [['muse_b', '=', '✓']]
    """
    out = []
    for row in _latest(rows).itertuples(index=False):
        rec = {"Generator": row.model}
        for key, head in METRICS:
            p = getattr(row, f"autometrics_{key}_p_value", None)
            rec[head] = "" if p is None or pd.isna(p) else (CHECK if p < SIGNIFICANCE else NOT)
        out.append(rec)
    table = pd.DataFrame(out, columns=["Generator", *(h for _, h in METRICS)])
    return table[["Generator", *(h for _, h in METRICS if (table[h] != "").any())]]


def auroc_ranking(rows: pd.DataFrame) -> pd.DataFrame:
    """Per generator, its metrics by AUROC (best first) with the interval and the p-value."""
    out = []
    for row in _latest(rows).itertuples(index=False):
        for key, head in METRICS:
            value = getattr(row, f"autometrics_{key}_auroc", None)
            if value is None or pd.isna(value):
                continue
            out.append({"Generator": row.model, "Metric": head, "AUROC": value,
                        "low": getattr(row, f"autometrics_{key}_auroc_low", None),
                        "high": getattr(row, f"autometrics_{key}_auroc_high", None),
                        "p": getattr(row, f"autometrics_{key}_p_value", None)})
    table = pd.DataFrame(out, columns=["Generator", "Metric", "AUROC", "low", "high", "p"])
    return table.sort_values(["Generator", "AUROC"], ascending=[True, False]).reset_index(drop=True)


def table3_csv(table: pd.DataFrame) -> str:
    """The table as CSV text; generator names that a spreadsheet would read as a formula are neutralised."""
    return csv_frame(table, ["Generator"]).to_csv(index=False)


def table3_latex(table: pd.DataFrame, label: str = "tab:geckonum_table3") -> str:
    """A booktabs table in Table 3's layout (✓ as ``\\checkmark``).

    Example:
        >>> "muse\\\\_b & = & \\\\checkmark \\\\\\\\" in table3_latex(pd.DataFrame(
        ...     [{"Generator": "muse_b", "CLIP": "=", "Counter": "✓"}]))
        True
    """
    heads = [h for _, h in METRICS if h in table]
    lines = [r"\begin{table}[t]", r"\centering",
             r"\caption{The ability of auto-metrics to discriminate between correct and incorrect image "
             r"generations ($\checkmark$: $p<0.05$, Mann-Whitney U test)}", rf"\label{{{label}}}",
             r"\begin{tabular}{l" + "c" * len(heads) + "}", r"\toprule", " & ".join(["", *heads]) + r" \\",
             r"\midrule"]
    for _, row in table.iterrows():
        cells = [r"\checkmark" if row[h] == CHECK else latex(row[h]) for h in heads]
        lines.append(" & ".join([latex(row["Generator"]), *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"
