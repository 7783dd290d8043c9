"""Bayesian Classify & Count (BCC): the posterior of a success rate from a classifier calibrated on human labels.

For one cell (one generator's outputs judged by one classifier on one attribute), with ``B`` human-labelled items
whose classifier decisions give the confusion counts ``tp, fn, fp, tn`` and ``n_m = N - B`` items without a human
label of which the classifier calls ``s_m`` positive::

    s_h = tp + fn,  B = tp + fn + fp + tn
    p   ~ Beta(s_h + 1, B - s_h + 1)
    tpr ~ Beta(tp + 1, fn + 1)
    fpr ~ Beta(fp + 1, tn + 1)
    s_m ~ Binomial(n_m, tpr * p + fpr * (1 - p))

K cells are fitted in one compiled PyMC model with every variable of shape ``(K,)``; the cells share no
parameter, so the joint posterior is the product of the per-cell posteriors and each cell's draws follow the same
distribution as a fit of that cell alone.

Input rules (see ``docs/bcc.md``):

* Negative or non-integer counts, ``s_m > n_m``, ``n_m = 0`` (every item has a human label: use the human
  posterior ``Beta(s_h + 1, B - s_h + 1)`` directly) and ``B = 0`` (no calibration labels: ``p`` is not
  identified) raise ``QuantifyInputError``.
* ``tp + fn = 0`` (no human positive among the ``B`` labels) raises ``NoHumanPositivesError`` unless the
  caller opts in with ``allow_no_human_positives=True``. With the opt-in the model stays proper: ``tpr`` keeps its
  uniform prior ``Beta(1, 1)``, ``p`` its human posterior ``Beta(1, B + 1)``, and a ``BCCWarning`` says that the
  TPR is prior-only. The opt-in is for callers that record the case (the tasks flag such cells with
  ``no_human_positives``): a generator with a low success rate will often have no human positive among 100
  labels, and the source study reports BCC in the mirror case (``fp + tn = 0``).
* ``fp + tn = 0`` (no human negative) is accepted with a ``BCCWarning`` (``fpr`` keeps its uniform prior).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import arviz as az
import numpy as np
import pymc as pm

from countboard.quantify.errors import BCCWarning, NoHumanPositivesError, QuantifyInputError

#: R-hat above this marks a posterior as not converged.
RHAT_MAX = 1.01


@dataclass(frozen=True)
class SamplerConfig:
    """How the NUTS sampler runs: ``draws`` kept per chain after ``tune`` adaptation steps.

    ``target_accept`` is 0.65 rather than PyMC's 0.8: the BCC posterior is smooth (no divergence in the 252-cell
    benchmark), and the larger step halves the leapfrog steps of a batched fit at the same ESS and a lower R-hat
    (``docs/benchmarks.md``).
    """

    draws: int = 1000
    tune: int = 1000
    chains: int = 2
    cores: int = 1
    seed: int | None = 0
    target_accept: float = 0.65


@dataclass
class BCCFit:
    """Draws and diagnostics of K cells fitted together.

    Attributes:
        cells: Cell names, in the order of every array's first axis.
        draws: ``(K, chains * draws)`` posterior draws of ``p``.
        rhat: ``(K,)`` largest rank-normalised split R-hat of ``p``, ``tpr`` and ``fpr`` in each cell.
        ess: ``(K,)`` smallest bulk effective sample size of ``p``, ``tpr`` and ``fpr`` in each cell.
        idata: The ArviZ InferenceData (posterior, sample stats, observed data), dimension ``cell``.
    """

    cells: list[str]
    draws: np.ndarray
    rhat: np.ndarray
    ess: np.ndarray
    idata: az.InferenceData

    @property
    def converged(self) -> np.ndarray:
        """``(K,)`` True where R-hat is at most ``RHAT_MAX``."""
        return self.rhat <= RHAT_MAX


def _as_counts(name: str, value) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(value))
    if arr.ndim != 1:
        raise QuantifyInputError(f"{name} must be a count or a 1-D array of counts, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)):
        raise QuantifyInputError(f"{name} must hold finite numbers, got {value!r}")
    if np.any(arr != np.round(arr)):
        raise QuantifyInputError(f"{name} must hold whole counts, got {arr[arr != np.round(arr)][:3].tolist()}")
    bad = np.flatnonzero(arr < 0)
    if bad.size:
        raise QuantifyInputError(f"{name} is negative in cell(s) {bad[:5].tolist()}: counts cannot be negative")
    return arr.astype(np.int64)


def check_counts(tp, fn, fp, tn, s_m, n_m) -> dict[str, np.ndarray]:
    """Check BCC inputs (scalars or ``(K,)`` arrays) and return them as int64 arrays of one length.

    Raises:
        QuantifyInputError: see the module docstring for the rules.
    """
    counts = {k: _as_counts(k, v) for k, v in dict(tp=tp, fn=fn, fp=fp, tn=tn, s_m=s_m, n_m=n_m).items()}
    lengths = {k: len(v) for k, v in counts.items()}
    k_cells = max(lengths.values())
    for key, arr in counts.items():
        if len(arr) == 1 and k_cells > 1:
            counts[key] = np.repeat(arr, k_cells)
        elif len(arr) != k_cells:
            raise QuantifyInputError(f"BCC inputs have different lengths: {lengths}; pass one value per cell")
    b = counts["tp"] + counts["fn"] + counts["fp"] + counts["tn"]
    checks = [
        (b == 0, "has no human label (tp + fn + fp + tn = 0): p is not identified without calibration labels; "
                 "label a random subset of the items"),
        (counts["n_m"] == 0, "has no item without a human label (n_m = 0): nothing for the classifier to add; "
                             "use the human posterior Beta(s_h + 1, B - s_h + 1) (cc_posterior(s_h, B))"),
        (counts["s_m"] > counts["n_m"], "has more classifier positives than unlabelled items (s_m > n_m)"),
    ]
    for mask, message in checks:
        bad = np.flatnonzero(mask)
        if bad.size:
            raise QuantifyInputError(f"cell(s) {bad[:5].tolist()} {message}")
    return counts


def validate_counts(tp, fn, fp, tn, s_m, n_m, *, cells: Sequence[str] | None = None,
                    allow_no_human_positives: bool = False) -> dict[str, np.ndarray]:
    """``check_counts``, plus the rule for cells whose TPR or FPR has no calibration data.

    Raises:
        NoHumanPositivesError: a cell has ``tp + fn = 0`` and ``allow_no_human_positives`` is False.
    """
    counts = check_counts(tp, fn, fp, tn, s_m, n_m)
    no_pos = np.flatnonzero(counts["tp"] + counts["fn"] == 0)
    if no_pos.size and not allow_no_human_positives:
        names = [str(cells[i]) if cells is not None else str(i) for i in no_pos[:5]]
        raise NoHumanPositivesError(
            f"cell(s) {names} have no human positive among their calibration labels (tp + fn = 0), so the "
            "classifier's TPR is not calibrated and p rests on its human posterior Beta(1, B + 1); label more "
            "items of these cells, or pass allow_no_human_positives=True and report the cells as prior-only")
    for mask, rate, side in [(counts["tp"] + counts["fn"] == 0, "tpr", "positive"),
                             (counts["fp"] + counts["tn"] == 0, "fpr", "negative")]:
        bad = np.flatnonzero(mask)
        if bad.size:
            warnings.warn(f"cell(s) {bad[:5].tolist()}: no human {side} among the calibration labels, so {rate} "
                          "keeps its uniform prior Beta(1, 1)", BCCWarning, stacklevel=3)
    return counts


def build_bcc_model(counts: dict[str, np.ndarray], cells: Sequence[str]) -> pm.Model:
    """The vectorised BCC model of ``len(cells)`` cells (validated ``counts`` from ``validate_counts``)."""
    tp, fn, fp, tn = (counts[k].astype(np.float64) for k in ("tp", "fn", "fp", "tn"))
    s_h, b = tp + fn, tp + fn + fp + tn
    with pm.Model(coords={"cell": list(cells)}) as model:
        p = pm.Beta("p", alpha=s_h + 1, beta=b - s_h + 1, dims="cell")
        tpr = pm.Beta("tpr", alpha=tp + 1, beta=fn + 1, dims="cell")
        fpr = pm.Beta("fpr", alpha=fp + 1, beta=tn + 1, dims="cell")
        pm.Binomial("s_m", n=counts["n_m"], p=tpr * p + fpr * (1 - p), observed=counts["s_m"], dims="cell")
    return model


@contextlib.contextmanager
def _quiet_pymc():
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def sample_model(model: pm.Model, cfg: SamplerConfig) -> az.InferenceData:
    """NUTS draws of ``model`` with ``cfg``, without progress bars or PyMC's own log lines and checks."""
    with model, _quiet_pymc(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*BLAS.*")
        return pm.sample(draws=cfg.draws, tune=cfg.tune, chains=cfg.chains, cores=cfg.cores, random_seed=cfg.seed,
                         target_accept=cfg.target_accept, progressbar=False, compute_convergence_checks=False)


def _diagnostics(idata: az.InferenceData) -> tuple[np.ndarray, np.ndarray]:
    """Per cell: the largest R-hat (NaN with one chain, where it is undefined) and the smallest bulk ESS."""
    names = ["p", "tpr", "fpr"]
    ess = az.ess(idata, var_names=names)
    ess_min = np.min([ess[v].values for v in names], axis=0)
    if idata.posterior.sizes["chain"] < 2:
        return np.full(idata.posterior.sizes["cell"], np.nan), ess_min
    rhat = az.rhat(idata, var_names=names)
    return np.max([rhat[v].values for v in names], axis=0), ess_min


def fit_bcc_batch(tp, fn, fp, tn, s_m, n_m, *, cells: Sequence[str] | None = None,
                  sampler: SamplerConfig | None = None, allow_no_human_positives: bool = False) -> BCCFit:
    """Fit K independent BCC cells in one compiled PyMC model.

    Args:
        tp, fn, fp, tn: ``(K,)`` confusion counts of the classifier against the human labels (positive = success).
        s_m, n_m: ``(K,)`` classifier positives among, and number of, items without a human label.
        cells: Names of the cells (default ``"0" .. "K-1"``).
        sampler: Sampler settings (default ``SamplerConfig()``: 2 chains of 1000 draws after 1000 tuning steps).
        allow_no_human_positives: Fit cells with ``tp + fn = 0`` (with a ``BCCWarning``) instead of raising
            ``NoHumanPositivesError``.

    Returns:
        A ``BCCFit``; a ``BCCWarning`` names the cells whose R-hat exceeds 1.01.

    Example:
        >>> fit = fit_bcc_batch([40, 10], [10, 5], [5, 20], [45, 65], [4500, 2500], [9900, 9900],
        ...                     sampler=SamplerConfig(draws=200, tune=200))  # doctest: +SKIP
        >>> fit.draws.shape  # doctest: +SKIP
        (2, 400)
    """
    counts = check_counts(tp, fn, fp, tn, s_m, n_m)
    k_cells = len(counts["tp"])
    cells = [str(c) for c in (cells if cells is not None else range(k_cells))]
    if len(cells) != k_cells or len(set(cells)) != k_cells:
        raise QuantifyInputError(f"need {k_cells} distinct cell names, got {cells[:5]}...")
    counts = validate_counts(*(counts[k] for k in ("tp", "fn", "fp", "tn", "s_m", "n_m")), cells=cells,
                             allow_no_human_positives=allow_no_human_positives)
    idata = sample_model(build_bcc_model(counts, cells), sampler or SamplerConfig())
    rhat, ess = _diagnostics(idata)
    draws = idata.posterior["p"].transpose("cell", "chain", "draw").values.reshape(k_cells, -1)
    fit = BCCFit(cells=cells, draws=draws, rhat=rhat, ess=ess, idata=idata)
    bad = np.flatnonzero(rhat > RHAT_MAX)
    if bad.size:
        worst = ", ".join(f"{cells[i]} ({rhat[i]:.3f})" for i in bad[:5])
        warnings.warn(f"R-hat above {RHAT_MAX} in {bad.size} of {k_cells} cell(s): {worst}; draw more samples "
                      "(SamplerConfig.draws / tune) before trusting these posteriors", BCCWarning, stacklevel=2)
    return fit


def fit_bcc(tp: int, fn: int, fp: int, tn: int, s_m: int, n_m: int, *,
            sampler: SamplerConfig | None = None, allow_no_human_positives: bool = False) -> BCCFit:
    """Fit one BCC cell (a batch of one); see ``fit_bcc_batch``."""
    for name, value in dict(tp=tp, fn=fn, fp=fp, tn=tn, s_m=s_m, n_m=n_m).items():
        if np.ndim(value) != 0:
            raise QuantifyInputError(f"fit_bcc fits one cell: {name} must be a scalar; use fit_bcc_batch for K")
    return fit_bcc_batch(tp, fn, fp, tn, s_m, n_m, sampler=sampler,
                         allow_no_human_positives=allow_no_human_positives)


def bcc_posterior(tp: int, fn: int, fp: int, tn: int, s_m: int, n_m: int, *, draws: int = 1000,
                  chains: int = 2, seed: int | None = 0, tune: int | None = None, cores: int = 1,
                  allow_no_human_positives: bool = False) -> np.ndarray:
    """Posterior draws of the success rate ``p`` of one cell (``chains * draws`` values).

    See the module docstring for the model and the input rules; ``tune`` defaults to ``draws``. Use ``fit_bcc``
    to keep the R-hat and ESS with the draws.

    Example:
        >>> p = bcc_posterior(40, 10, 5, 45, 4500, 9900, draws=300)  # doctest: +SKIP
        >>> 0.4 < p.mean() < 0.6  # doctest: +SKIP
        True
    """
    cfg = SamplerConfig(draws=draws, tune=draws if tune is None else tune, chains=chains, cores=cores, seed=seed)
    return fit_bcc(tp, fn, fp, tn, s_m, n_m, sampler=cfg,
                   allow_no_human_positives=allow_no_human_positives).draws[0]


def bcc_posterior_batch(tp, fn, fp, tn, s_m, n_m, *, draws: int = 1000, chains: int = 2, seed: int | None = 0,
                        tune: int | None = None, cores: int = 1, allow_no_human_positives: bool = False
                        ) -> np.ndarray:
    """``(K, chains * draws)`` posterior draws of ``p`` for K cells fitted in one model (see ``fit_bcc_batch``)."""
    cfg = SamplerConfig(draws=draws, tune=draws if tune is None else tune, chains=chains, cores=cores, seed=seed)
    return fit_bcc_batch(tp, fn, fp, tn, s_m, n_m, sampler=cfg,
                         allow_no_human_positives=allow_no_human_positives).draws
