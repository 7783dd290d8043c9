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
#: Columns of a cell's counts in task records (``COUNT_COLUMNS`` and the failed outputs).
RECORD_COLUMNS = [*COUNT_COLUMNS, "n_failed"]
#: Column of ``report_cells`` marking cells without a human positive (``tp + fn = 0``, prior-only TPR).
NO_HUMAN_POSITIVES = "no_human_positives"


@dataclass(frozen=True)
class CellCounts:
    """Counts of one cell: confusion on the ``B`` labelled items, classifier positives ``s_m`` among the rest.

    ``n_failed`` counts the outputs that failed outright (an empty, blank, refused or unparseable generation, or one
    the classifier could not judge): known failures, outside the BCC fit of the ``n_judged`` others, but inside
    the cell's ``n_total`` and counted as "not satisfied" by every rate.
    """

    tp: int
    fn: int
    fp: int
    tn: int
    s_m: int
    n_m: int
    n_failed: int = 0

    @property
    def n_human(self) -> int:
        return self.tp + self.fn + self.fp + self.tn

    @property
    def s_human(self) -> int:
        return self.tp + self.fn

    @property
    def n_judged(self) -> int:
        """Items in the BCC fit: labelled or not, without the failed outputs."""
        return self.n_human + self.n_m

    @property
    def n_total(self) -> int:
        return self.n_judged + self.n_failed

    @property
    def judged_share(self) -> float:
        """``n_judged / n_total``: the factor from the success rate of the judged outputs to that of all."""
        return self.n_judged / self.n_total if self.n_total else 1.0

    @property
    def s_cc(self) -> int:
        """Classifier positives over all ``N`` items (labelled or not)."""
        return self.tp + self.fp + self.s_m


def counts_from_labels(decision: np.ndarray, human: np.ndarray, failed: np.ndarray | None = None) -> CellCounts:
    """Counts of one cell from per-item classifier decisions (0/1) and human labels (0/1, NaN when unlabelled).

    Items where ``failed`` is true (failed outputs) are counted in ``n_failed`` only; their decision and label
    are not read.

    Example:
        >>> counts_from_labels(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, np.nan, np.nan]))
        CellCounts(tp=1, fn=0, fp=1, tn=1, s_m=1, n_m=2, n_failed=0)
    """
    d = np.asarray(decision, dtype=np.float64)
    h = np.asarray(human, dtype=np.float64)
    if d.shape != h.shape or d.ndim != 1:
        raise QuantifyInputError(f"decision and human must be 1-D of one length, got {d.shape} and {h.shape}")
    if failed is not None:
        bad = np.asarray(failed, dtype=bool)
        if bad.shape != d.shape:
            raise QuantifyInputError(f"failed must have the shape of decision {d.shape}, got {bad.shape}")
        judged = counts_from_labels(d[~bad], h[~bad])
        return CellCounts(**{**asdict(judged), "n_failed": int(bad.sum())})
    if not np.all(np.isin(d, (0.0, 1.0))):
        raise QuantifyInputError("classifier decisions must be 0 or 1 (1 = the attribute is realised)")
    labelled = ~np.isnan(h)
    if not np.all(np.isin(h[labelled], (0.0, 1.0))):
        raise QuantifyInputError("human labels must be 0, 1 or NaN (NaN = no human label)")
    dl, hl = d[labelled], h[labelled]
    return CellCounts(tp=int(np.sum((dl == 1) & (hl == 1))), fn=int(np.sum((dl == 0) & (hl == 1))),
                      fp=int(np.sum((dl == 1) & (hl == 0))), tn=int(np.sum((dl == 0) & (hl == 0))),
                      s_m=int(np.sum(d[~labelled] == 1)), n_m=int(np.sum(~labelled)))


def credible_interval(draws: np.ndarray, level: float = INTERVAL_MASS) -> tuple[float, float]:
    """Equal-tailed interval holding ``level`` of the posterior mass of ``draws``.

    Example:
        >>> [round(x, 3) for x in credible_interval(np.linspace(0, 1, 1001), 0.9)]
        [0.05, 0.95]
    """
    if not 0 < level < 1:
        raise QuantifyInputError(f"interval level must be between 0 and 1, got {level}")
    lo, hi = np.quantile(np.asarray(draws, dtype=np.float64).ravel(), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _beta_with(mean: float, var: float) -> tuple[float, float]:
    """The Beta distribution with this mean and variance (method of moments)."""
    common = mean * (1 - mean) / var - 1
    return mean * common, (1 - mean) * common


def _scaled_beta(a: float, b: float, share: float) -> tuple[float, float]:
    """Beta matched to the mean and variance of ``share * X``, ``X ~ Beta(a, b)`` (``share = 1``: ``(a, b)``)."""
    if share == 1.0:
        return a, b
    return _beta_with(share * beta_mean(a, b), share**2 * beta_var(a, b))


def cell_report(counts: CellCounts, draws: np.ndarray, rhat: float = np.nan, ess: float = np.nan,
                mean: float | None = None, mcse: float = np.nan, human: tuple[float, float] | None = None,
                level: float = INTERVAL_MASS) -> dict:
    """Metrics of one cell from its counts and BCC draws of ``p`` (keys as in ``schema/bcc.yaml``).

    ``draws`` (and ``mean``, when the fit has a better posterior mean than the draws', as the exact method has;
    ``mcse`` its Monte-Carlo standard error) are of the success rate of the judged outputs. With failed outputs
    (``counts.n_failed``) every rate is that of all outputs: the judged rate times ``counts.judged_share``, and
    CC counts the failed outputs as "not satisfied"; ``eas`` and ``sample_value`` stay those of the judged fit.
    ``human``: the human posterior's Beta parameters when they are not ``(s_h + 1, B - s_h + 1)`` of the counts
    (a pooled cell of stratified labels, ``quantify.pooling``). ``level``: mass of ``acs_bcc_low`` .. ``_high``.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> r = cell_report(CellCounts(40, 10, 5, 45, 4500, 9900), rng.beta(200, 200, 4000))
        >>> round(r["acs_human_mean"], 4), round(r["acs_cc_mean"], 4)
        (0.5, 0.4545)
    """
    share = counts.judged_share
    judged = np.asarray(draws, dtype=np.float64).ravel()
    v, eas = sample_value(*beta_from_moments(judged), counts.n_human, counts.n_judged)
    draws = share * judged
    bcc_mean = float(draws.mean() if mean is None else share * mean)
    var = float(draws.var(ddof=1))
    # the Beta summary keeps the reported mean (the exact method's is better than its resampled draws')
    a, b = _beta_with(bcc_mean, var) if 0 < var < bcc_mean * (1 - bcc_mean) else beta_from_moments(draws)
    a_cc, b_cc = cc_posterior(counts.s_cc, counts.n_total)
    a_h, b_h = _scaled_beta(*(cc_posterior(counts.s_human, counts.n_human) if human is None else human), share)
    lo, hi = credible_interval(draws, level)
    return {
        "acs_bcc_mean": bcc_mean, "acs_bcc_low": float(lo),
        "acs_bcc_high": float(hi), "acs_cc_mean": beta_mean(a_cc, b_cc), "acs_human_mean": beta_mean(a_h, b_h),
        "js_bcc_human": js_divergence_beta(a, b, a_h, b_h), "js_cc_human": js_divergence_beta(a_cc, b_cc, a_h, b_h),
        "var_bcc": float(draws.var(ddof=1)), "var_cc": beta_var(a_cc, b_cc), "var_human": beta_var(a_h, b_h),
        "eas": eas, "sample_value": v,
        "bcc_alpha": a, "bcc_beta": b, "cc_alpha": a_cc, "cc_beta": b_cc, "human_alpha": a_h, "human_beta": b_h,
        "bcc_tp": counts.tp, "bcc_fn": counts.fn, "bcc_fp": counts.fp, "bcc_tn": counts.tn,
        "acs_n_human": counts.n_human, "acs_n_items": counts.n_total, "acs_failure_rate": 1.0 - share,
        "bcc_rhat": float(rhat), "bcc_ess": float(ess), "bcc_mcse": float(share * mcse),
    }


def report_cells(counts: Sequence[CellCounts], names: Sequence[str], sampler: SamplerConfig | None = None, *,
                 allow_no_human_positives: bool = False, method: str = "auto",
                 level: float = INTERVAL_MASS) -> tuple[pd.DataFrame, BCCFit]:
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
    rows = [cell_report(c, fit.draws[k], fit.rhat[k], fit.ess[k], fit.mean[k], fit.mcse[k], level=level)
            for k, c in enumerate(counts)]
    report = pd.DataFrame(rows, index=pd.Index(list(names), name="cell"))
    report[NO_HUMAN_POSITIVES] = [c.s_human == 0 for c in counts]
    return report, fit
