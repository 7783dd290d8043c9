"""From classifier decisions and human labels to the per-cell BCC report (metrics, Beta parameters, confusion).

A *cell* is one set of items judged by one classifier (one generator, one attribute or prompt type). Its report
holds three posteriors of the success rate: human (``B`` labels only), CC (classifier decisions on all ``N``
items) and BCC (``bcc.fit_bcc_batch``, summarised by moment matching), plus their divergences and the sample value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from countboard.quantify.bcc import BCCFit, SamplerConfig, fit_bcc_batch
from countboard.quantify.beta import (
    beta_from_moments,
    beta_mean,
    beta_var,
    cc_posterior,
    js_divergence_beta,
    sample_value,
)
from countboard.quantify.errors import QuantifyInputError

#: Mass of the equal-tailed BCC interval (``acs_bcc_low`` .. ``acs_bcc_high``).
INTERVAL_MASS = 0.9
COUNT_COLUMNS = ["tp", "fn", "fp", "tn", "s_m", "n_m"]
#: Column of ``report_cells`` marking cells without a human positive (``tp + fn = 0``, prior-only TPR).
NO_HUMAN_POSITIVES = "no_human_positives"


@dataclass(frozen=True)
class CellCounts:
    """Counts of one cell: confusion on the ``B`` labelled items, classifier positives ``s_m`` among the rest."""

    tp: int
    fn: int
    fp: int
    tn: int
    s_m: int
    n_m: int

    @property
    def n_human(self) -> int:
        return self.tp + self.fn + self.fp + self.tn

    @property
    def s_human(self) -> int:
        return self.tp + self.fn

    @property
    def n_total(self) -> int:
        return self.n_human + self.n_m

    @property
    def s_cc(self) -> int:
        """Classifier positives over all ``N`` items (labelled or not)."""
        return self.tp + self.fp + self.s_m


def counts_from_labels(decision: np.ndarray, human: np.ndarray) -> CellCounts:
    """Counts of one cell from per-item classifier decisions (0/1) and human labels (0/1, NaN when unlabelled).

    Example:
        >>> counts_from_labels(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, np.nan, np.nan]))
        CellCounts(tp=1, fn=0, fp=1, tn=1, s_m=1, n_m=2)
    """
    d = np.asarray(decision, dtype=np.float64)
    h = np.asarray(human, dtype=np.float64)
    if d.shape != h.shape or d.ndim != 1:
        raise QuantifyInputError(f"decision and human must be 1-D of one length, got {d.shape} and {h.shape}")
    if not np.all(np.isin(d, (0.0, 1.0))):
        raise QuantifyInputError("classifier decisions must be 0 or 1 (1 = the attribute is realised)")
    labelled = ~np.isnan(h)
    if not np.all(np.isin(h[labelled], (0.0, 1.0))):
        raise QuantifyInputError("human labels must be 0, 1 or NaN (NaN = no human label)")
    dl, hl = d[labelled], h[labelled]
    return CellCounts(tp=int(np.sum((dl == 1) & (hl == 1))), fn=int(np.sum((dl == 0) & (hl == 1))),
                      fp=int(np.sum((dl == 1) & (hl == 0))), tn=int(np.sum((dl == 0) & (hl == 0))),
                      s_m=int(np.sum(d[~labelled] == 1)), n_m=int(np.sum(~labelled)))


def cell_report(counts: CellCounts, draws: np.ndarray, rhat: float = np.nan, ess: float = np.nan,
                mean: float | None = None, mcse: float = np.nan) -> dict:
    """Metrics of one cell from its counts and BCC draws of ``p`` (keys as in ``schema/bcc.yaml``).

    ``mean`` is the posterior mean when the fit has a better one than the draws' (the weighted mean of the exact
    method), ``mcse`` its Monte-Carlo standard error.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> r = cell_report(CellCounts(40, 10, 5, 45, 4500, 9900), rng.beta(200, 200, 4000))
        >>> round(r["acs_human_mean"], 4), round(r["acs_cc_mean"], 4)
        (0.5, 0.4545)
    """
    draws = np.asarray(draws, dtype=np.float64).ravel()
    a, b = beta_from_moments(draws)
    a_cc, b_cc = cc_posterior(counts.s_cc, counts.n_total)
    a_h, b_h = cc_posterior(counts.s_human, counts.n_human)
    tail = (1 - INTERVAL_MASS) / 2
    lo, hi = np.quantile(draws, [tail, 1 - tail])
    v, eas = sample_value(a, b, counts.n_human, counts.n_total)
    return {
        "acs_bcc_mean": float(draws.mean() if mean is None else mean), "acs_bcc_low": float(lo), "acs_bcc_high": float(hi),
        "acs_cc_mean": beta_mean(a_cc, b_cc), "acs_human_mean": beta_mean(a_h, b_h),
        "js_bcc_human": js_divergence_beta(a, b, a_h, b_h), "js_cc_human": js_divergence_beta(a_cc, b_cc, a_h, b_h),
        "var_bcc": float(draws.var(ddof=1)), "var_cc": beta_var(a_cc, b_cc), "var_human": beta_var(a_h, b_h),
        "eas": eas, "sample_value": v,
        "bcc_alpha": a, "bcc_beta": b, "cc_alpha": a_cc, "cc_beta": b_cc, "human_alpha": a_h, "human_beta": b_h,
        "bcc_tp": counts.tp, "bcc_fn": counts.fn, "bcc_fp": counts.fp, "bcc_tn": counts.tn,
        "acs_n_human": counts.n_human, "acs_n_items": counts.n_total,
        "bcc_rhat": float(rhat), "bcc_ess": float(ess), "bcc_mcse": float(mcse),
    }


def report_cells(counts: Sequence[CellCounts], names: Sequence[str], sampler: SamplerConfig | None = None, *,
                 allow_no_human_positives: bool = False, method: str = "auto") -> tuple[pd.DataFrame, BCCFit]:
    """Fit all cells at once (``fit_bcc_batch`` with ``method``) and return one report row per cell (index
    ``cell``) and the fit.

    With ``allow_no_human_positives`` cells with ``tp + fn = 0`` are fitted (their TPR keeps its prior) instead of
    raising ``NoHumanPositivesError``; the table's ``no_human_positives`` column (bool) marks them either way.
    """
    if len(counts) != len(names):
        raise QuantifyInputError(f"{len(counts)} cells but {len(names)} names")
    table = pd.DataFrame([asdict(c) for c in counts])
    fit = fit_bcc_batch(*(table[c].to_numpy() for c in COUNT_COLUMNS), cells=list(names), sampler=sampler,
                        allow_no_human_positives=allow_no_human_positives, method=method)
    rows = [cell_report(c, fit.draws[k], fit.rhat[k], fit.ess[k], fit.mean[k], fit.mcse[k])
            for k, c in enumerate(counts)]
    report = pd.DataFrame(rows, index=pd.Index(list(names), name="cell"))
    report[NO_HUMAN_POSITIVES] = [c.s_human == 0 for c in counts]
    return report, fit
