"""CC, human and BCC success rates of ``geckonum_autoeval`` units, overall and per prompt type.

Units are rows with ``cc_success`` (0/1, the evaluator's judgement), ``human`` (0/1, NaN without a label),
``prompt_type`` and optionally ``true_success``: image-question pairs or images, as the task scores them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _cell_rows(units: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    return [("all", units)] + [(str(t), g) for t, g in units.groupby("prompt_type", sort=True)]


def bcc_cells(units: pd.DataFrame, draws: int = 500, chains: int = 2, seed: int = 0,
              level: float = 0.95) -> pd.DataFrame:
    """CC, human and BCC success rates of the cell ``all`` (first row) and of each prompt type.

    ``units`` has ``cc_success`` (0/1), ``human`` (0/1, NaN without a label), ``prompt_type`` and optionally
    ``true_success``. The cells with labelled and unlabelled units go through the project's one BCC cell report
    (``countboard.quantify.report_cells``: all cells fitted together, interval of mass ``level``); a cell whose
    units are all labelled takes the human posterior ``Beta(s + 1, B - s + 1)``; a cell without labels has no BCC
    rate (NaN). ``bcc_alpha`` / ``bcc_beta`` are the Beta parameters of the BCC posterior (moment matched to the
    draws). A cell without a human success among its labels is fitted with a prior-only evaluator TPR and marked
    ``no_human_positives``.
    """
    from countboard.quantify import SamplerConfig, counts_from_labels, credible_interval, report_cells

    rows, fit = [], []
    for name, g in _cell_rows(units):
        counts = counts_from_labels(g["cc_success"].to_numpy(float), g["human"].to_numpy(float))
        row = {"prompt_type": name, "n": len(g), "n_labelled": counts.n_human,
               "cc_rate": float(g["cc_success"].mean()),
               "human_rate": counts.s_human / counts.n_human if counts.n_human else np.nan,
               "evaluator_tpr": counts.tp / counts.s_human if counts.s_human else np.nan,
               "evaluator_fpr": counts.fp / (counts.fp + counts.tn) if counts.fp + counts.tn else np.nan,
               "true_rate": float(g["true_success"].mean()) if "true_success" in g else np.nan,
               "bcc_rate": np.nan, "bcc_low": np.nan, "bcc_high": np.nan, "bcc_alpha": np.nan, "bcc_beta": np.nan,
               "no_human_positives": bool(counts.n_human and counts.s_human == 0)}  # fmt: skip
        if counts.n_human and counts.n_m:
            fit.append((len(rows), counts))
        elif counts.n_human:
            a, b = counts.s_human + 1, counts.n_human - counts.s_human + 1
            human = np.random.default_rng(seed).beta(a, b, size=draws * chains)
            lo, hi = credible_interval(human, level)
            row |= {"bcc_rate": float(human.mean()), "bcc_low": lo, "bcc_high": hi,
                    "bcc_alpha": float(a), "bcc_beta": float(b)}
        rows.append(row)
    if fit:
        sampler = SamplerConfig(draws=draws, tune=draws, chains=chains, seed=seed)
        report, _ = report_cells([c for _, c in fit], [rows[i]["prompt_type"] for i, _ in fit], sampler,
                                 allow_no_human_positives=True, level=level)
        for (i, _), (_, r) in zip(fit, report.iterrows(), strict=True):
            rows[i] |= {"bcc_rate": float(r["acs_bcc_mean"]), "bcc_low": float(r["acs_bcc_low"]),
                        "bcc_high": float(r["acs_bcc_high"]), "bcc_alpha": float(r["bcc_alpha"]),
                        "bcc_beta": float(r["bcc_beta"])}
    return pd.DataFrame(rows)


def bcc_report(units: pd.DataFrame, draws: int = 500, chains: int = 2, seed: int = 0,
               cells: pd.DataFrame | None = None, level: float = 0.95) -> tuple[dict[str, float], pd.DataFrame]:
    """CC, human and BCC success rates overall (metrics) and per prompt type (table); see ``bcc_cells``.

    ``cells`` is the output of ``bcc_cells(units, ...)`` when the caller already has it (it is fitted otherwise).
    """
    table = bcc_cells(units, draws, chains, seed, level) if cells is None else cells.copy()
    overall = table.iloc[0]
    metrics = {
        "autoeval_cc_rate": overall["cc_rate"], "autoeval_bcc_rate": overall["bcc_rate"],
        "autoeval_bcc_rate_low": overall["bcc_low"], "autoeval_bcc_rate_high": overall["bcc_high"],
        "autoeval_human_rate": overall["human_rate"], "autoeval_evaluator_tpr": overall["evaluator_tpr"],
        "autoeval_evaluator_fpr": overall["evaluator_fpr"], "autoeval_n_images": float(overall["n"]),
        "autoeval_n_labelled": float(overall["n_labelled"]),
    }  # fmt: skip
    if "true_success" in units:
        metrics["autoeval_true_rate"] = overall["true_rate"]
    metrics = {k: float(v) for k, v in metrics.items() if pd.notna(v)}
    table["accuracy"] = table["bcc_rate"].fillna(table["cc_rate"])
    return metrics, table.iloc[1:].reset_index(drop=True)


def replicate_report(scored: pd.DataFrame, replicates: int, sizes: list[int], n_headline: int, level: float,
                     seed: int) -> tuple[dict[str, float], pd.DataFrame]:
    """BCC, CC and the human-only posterior against the accuracy of every human label (``scored``: units with
    ``cc_success`` and ``human``, NaN where a unit has no label, left out), over ``replicates`` random labelled
    subsets of each size (``quantify.validation.replicate_calibration``): the metrics at ``n_headline`` labelled
    units and ``level``, and the table of every size and level (the calibration view)."""
    from countboard.quantify.validation import LEVELS, replicate_calibration

    scored = scored[np.isfinite(scored["human"].to_numpy(float))]
    levels = sorted(set(LEVELS) | {level})
    table = replicate_calibration(scored["cc_success"].to_numpy(int), scored["human"].to_numpy(float), sizes,
                                  replicates, levels, seed)
    metrics = {"autoeval_all_human_rate": float(scored["human"].mean()) if len(scored) else np.nan,
               "autoeval_n_all_human": float(len(scored))}
    head = table[(table["n_human"] == n_headline) & np.isclose(table["level"], level)]
    for row in head.itertuples(index=False):
        metrics[f"autoeval_{row.method}_coverage"] = row.coverage
        metrics[f"autoeval_{row.method}_mae"] = row.mae
    if not head.empty:
        metrics["autoeval_n_replicates"] = float(replicates)
    return {k: float(v) for k, v in metrics.items() if pd.notna(v)}, table
