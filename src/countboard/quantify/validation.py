"""BCC where the truth is known: replicate draws of the human-labelled subset from fully labelled units.

When every unit has a human label (GeckoNum's study labels every image), the accuracy of *all* human labels is
the quantity BCC estimates from a few of them. Each of ``R`` replicates draws ``n_human`` units at random (without
replacement) as the labelled subset, the rest being judged by the automatic judge only, and three estimates are
made from the same draw:

* **BCC**: the exact binary posterior (``quantify.exact``) of the replicate's cell ``(tp, fn, fp, tn, s_m, n_m)``,
  all ``R`` cells fitted at once;
* **CC**: the judge's success rate over all units, with the Beta posterior ``Beta(s + 1, n - s + 1)``;
* **human only**: ``Beta(s_h + 1, n_h - s_h + 1)`` of the replicate's labels alone.

Per estimate: the coverage of its equal-tailed interval at each nominal level (share of replicates whose interval
holds the all-human accuracy), its mean absolute error (posterior mean against that accuracy) and the mean width
of its interval. The replicates are drawn in one array (``(R, n)`` random keys, the ``n_human`` smallest labelled).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import beta as beta_dist

from countboard.quantify.errors import QuantifyInputError

METHODS = ("bcc", "cc", "human")
#: Nominal levels of the calibration view.
LEVELS = (0.5, 0.8, 0.9, 0.95)


def replicate_counts(decision: np.ndarray, human: np.ndarray, n_human: int, replicates: int,
                     rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``(R,)`` cell counts of ``replicates`` random labelled subsets of size ``n_human``.

    Example:
        >>> c = replicate_counts(np.array([1, 1, 0, 0]), np.array([1, 0, 0, 1]), 4, 2, np.random.default_rng(0))
        >>> # every unit labelled: each replicate has the same counts
        >>> {k: v.tolist() for k, v in c.items()}
        {'tp': [1, 1], 'fn': [1, 1], 'fp': [1, 1], 'tn': [1, 1], 's_m': [0, 0], 'n_m': [0, 0]}
    """
    d = np.asarray(decision, dtype=np.int64)
    h = np.asarray(human, dtype=np.int64)
    n = d.size
    if h.shape != d.shape or not 0 < n_human <= n:
        raise QuantifyInputError(f"need one human label per decision and 0 < n_human <= {n} (the units), got "
                                 f"{h.size} labels and n_human={n_human}")
    keys = rng.random((replicates, n))
    labelled = np.zeros((replicates, n), dtype=bool)
    np.put_along_axis(labelled, np.argpartition(keys, n_human - 1, axis=1)[:, :n_human], True, axis=1)
    tp = (labelled & (d == 1) & (h == 1)).sum(axis=1)
    fn = (labelled & (d == 0) & (h == 1)).sum(axis=1)
    fp = (labelled & (d == 1) & (h == 0)).sum(axis=1)
    tn = (labelled & (d == 0) & (h == 0)).sum(axis=1)
    s_m = (~labelled & (d == 1)).sum(axis=1)
    return {"tp": tp, "fn": fn, "fp": fp, "tn": tn, "s_m": s_m, "n_m": np.full(replicates, n - n_human)}


def _beta_rows(a: np.ndarray, b: np.ndarray, levels: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo = np.stack([beta_dist.ppf((1 - lv) / 2, a, b) for lv in levels], axis=1)
    hi = np.stack([beta_dist.ppf((1 + lv) / 2, a, b) for lv in levels], axis=1)
    return a / (a + b), lo, hi


def replicate_estimates(decision: np.ndarray, human: np.ndarray, n_human: int, replicates: int = 200,
                        levels: Sequence[float] = LEVELS, seed: int = 0, draws: int = 2000
                        ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per method: ``(mean (R,), low (R, L), high (R, L))`` of each replicate, intervals at each level."""
    from countboard.quantify.exact import ExactConfig, fit_exact

    rng = np.random.default_rng([seed, n_human])
    counts = replicate_counts(decision, human, n_human, replicates, rng)
    fit = fit_exact(counts, ExactConfig(draws=draws, seed=int(rng.integers(2**31))))
    q = np.stack([(1 - lv) / 2 for lv in levels] + [(1 + lv) / 2 for lv in levels])
    bounds = np.quantile(fit.p, q, axis=1).T  # (R, 2L)
    out = {"bcc": (fit.mean, bounds[:, :len(levels)], bounds[:, len(levels):])}
    s, n = float(np.sum(decision)), float(np.size(decision))
    ones = np.ones(replicates)
    out["cc"] = _beta_rows((s + 1) * ones, (n - s + 1) * ones, levels)
    s_h = (counts["tp"] + counts["fn"]).astype(float)
    out["human"] = _beta_rows(s_h + 1, n_human - s_h + 1, levels)
    return out


def replicate_calibration(decision: np.ndarray, human: np.ndarray, n_humans: Sequence[int] = (100,),
                          replicates: int = 200, levels: Sequence[float] = LEVELS, seed: int = 0,
                          draws: int = 2000) -> pd.DataFrame:
    """Coverage, mean absolute error and mean interval width of BCC, CC and the human-only posterior.

    Args:
        decision: The automatic judge's 0/1 decision per unit.
        human: The human 0/1 label of every unit (their mean is the truth the estimates are scored against).
        n_humans: Sizes of the labelled subset; sizes from the number of units up are left out (no unit would be
            left for the judge alone).
        replicates: Random labelled subsets per size.
        levels: Nominal levels of the intervals.
        seed: Seed of the subsets and of BCC's sampler.
        draws: Posterior draws per BCC replicate.

    Returns:
        One row per (method, n_human, level): ``truth``, ``coverage``, ``mae``, ``width``, ``replicates``.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> h = (rng.random(2000) < 0.4).astype(int)
        >>> d = np.where(h == 1, rng.random(2000) < 0.9, rng.random(2000) < 0.2).astype(int)
        >>> t = replicate_calibration(d, h, [100], replicates=50, levels=[0.9])
        >>> t.set_index("method").loc["bcc", "coverage"] > t.set_index("method").loc["cc", "coverage"]
        True
    """
    decision = np.asarray(decision, dtype=np.int64)
    human = np.asarray(human, dtype=np.float64)
    if np.isnan(human).any():
        raise QuantifyInputError("replicate_calibration needs a human label for every unit")
    truth = float(human.mean())
    rows = []
    for n_h in sorted({int(n) for n in n_humans if 0 < int(n) < decision.size}):
        est = replicate_estimates(decision, human.astype(np.int64), n_h, replicates, levels, seed, draws)
        for method in METHODS:
            mean, lo, hi = est[method]
            mae = float(np.abs(mean - truth).mean())
            for j, lv in enumerate(levels):
                rows.append({"method": method, "n_human": n_h, "level": float(lv), "truth": truth,
                             "coverage": float(((lo[:, j] <= truth) & (truth <= hi[:, j])).mean()), "mae": mae,
                             "width": float((hi[:, j] - lo[:, j]).mean()), "replicates": int(replicates)})
    return pd.DataFrame(rows, columns=["method", "n_human", "level", "truth", "coverage", "mae", "width",
                                       "replicates"])
