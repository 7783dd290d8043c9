"""The pooled cell of groups whose human labels were drawn per group: a population-weighted combination.

When every group (prompt type) gets its own ``B`` human labels, the labelled items are a *stratified* sample:
a group of 200 items and one of 10,000 both give 100 labels. BCC's model (``p ~ Beta(s_h + 1, B - s_h + 1)``,
``tpr`` and ``fpr`` from the confusion counts) assumes the labelled items are a simple random sample of the cell,
so summing the groups' counts into one cell weighs each group by its labels, not by its items, and the pooled
rate leans towards the small groups. The rate of the whole set is ``p_all = sum_g N_g p_g / sum_g N_g``, a
function of the group rates; with independent group posteriors its draws are the weighted sums of the groups'
draws (draw ``d`` of every group together), and the same holds for the classifier's rates on the whole set::

    tpr_all = sum_g N_g p_g tpr_g / sum_g N_g p_g        fpr_all = sum_g N_g (1 - p_g) fpr_g / sum_g N_g (1 - p_g)

The human posterior of the pooled cell is the same combination of the groups' human Betas, moment matched.

Failed outputs (``CellCounts.n_failed``) are known failures: the combination runs over the judged outputs
(weights ``n_judged`` of each group) and ``cell_report`` scales the result by the pooled share of judged outputs,
which gives ``sum_g N_g share_g p_g / sum_g N_g`` for the rate of all outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from countboard.quantify.bcc import BCCFit
from countboard.quantify.beta import beta_mean, beta_var, cc_posterior
from countboard.quantify.cells import CellCounts, cell_report
from countboard.quantify.errors import QuantifyInputError


def population_weights(counts: Sequence[CellCounts]) -> np.ndarray:
    """Each group's share ``N_g / sum N`` of the judged items (labelled or not; failed outputs aside).

    Example:
        >>> population_weights([CellCounts(5, 5, 5, 5, 10, 180), CellCounts(5, 5, 5, 5, 10, 780)]).tolist()
        [0.2, 0.8]
    """
    sizes = np.array([c.n_judged for c in counts], dtype=np.float64)
    if sizes.size == 0 or sizes.sum() <= 0:
        raise QuantifyInputError("pooling needs at least one group with items")
    return sizes / sizes.sum()


def pooled_human(counts: Sequence[CellCounts], weights: np.ndarray) -> tuple[float, float]:
    """Beta ``(a, b)`` matched to the mean and variance of ``sum_g w_g h_g``, ``h_g ~ Beta(s_h + 1, B - s_h + 1)``.

    Example:
        >>> a, b = pooled_human([CellCounts(10, 0, 0, 10, 5, 80)], np.array([1.0]))
        >>> round(a, 6), round(b, 6)
        (11.0, 11.0)
    """
    params = [cc_posterior(c.s_human, c.n_human) for c in counts]
    mean = float(sum(w * beta_mean(a, b) for w, (a, b) in zip(weights, params, strict=True)))
    var = float(sum(w**2 * beta_var(a, b) for w, (a, b) in zip(weights, params, strict=True)))
    common = mean * (1 - mean) / var - 1
    return mean * common, (1 - mean) * common


def pool_posterior(posterior: xr.Dataset, weights: np.ndarray, name: str) -> xr.Dataset:
    """``posterior`` (``p``, ``tpr``, ``fpr`` over ``chain, draw, cell``) with the pooled cell ``name`` appended."""
    w = xr.DataArray(weights, dims="cell", coords={"cell": posterior["cell"].values})
    p, tpr, fpr = posterior["p"], posterior["tpr"], posterior["fpr"]
    pooled = xr.Dataset({
        "p": (p * w).sum("cell"),
        "tpr": (p * tpr * w).sum("cell") / (p * w).sum("cell"),
        "fpr": ((1 - p) * fpr * w).sum("cell") / ((1 - p) * w).sum("cell"),
    }).expand_dims(cell=[name])
    return xr.concat([posterior[["p", "tpr", "fpr"]], pooled.transpose(*posterior["p"].dims)], dim="cell")


def pooled_report(counts: Sequence[CellCounts], fit: BCCFit, name: str) -> tuple[dict, np.ndarray, xr.Dataset]:
    """The report row, draws and posterior of the pooled cell of the groups fitted in ``fit`` (same order).

    The draws are of the success rate of all outputs (failed ones included, as failures); the posterior's ``p`` is
    that of the judged outputs, like the groups' in ``fit.idata``.

    ``acs_cc_mean``, the confusion counts and the failed outputs are those of all items (sums); ``acs_bcc_*`` and
    ``acs_human_mean`` are the population-weighted combinations; ``bcc_ess`` is the smallest and ``bcc_rhat`` the largest over the
    groups, and ``bcc_mcse`` combines the groups' as ``sqrt(sum w^2 mcse^2)``.
    """
    if len(counts) != len(fit.cells):
        raise QuantifyInputError(f"{len(counts)} groups but the fit has {len(fit.cells)} cells")
    weights = population_weights(counts)
    total = CellCounts(*(sum(getattr(c, f) for c in counts) for f in ("tp", "fn", "fp", "tn", "s_m", "n_m",
                                                                        "n_failed")))
    draws = weights @ fit.draws
    mcse = float(np.sqrt(np.sum(weights**2 * fit.mcse**2))) if fit.mcse is not None else np.nan
    rhat = float(np.max(fit.rhat)) if np.isfinite(fit.rhat).all() else np.nan
    row = cell_report(total, draws, rhat, float(np.min(fit.ess)), float(weights @ fit.mean), mcse,
                      human=pooled_human(counts, weights))
    return row, total.judged_share * draws, pool_posterior(fit.idata.posterior, weights, name)
