"""Bayesian Classify & Count (BCC): the posterior of a success rate from a classifier calibrated on human labels.

For one cell (one generator's outputs judged by one classifier on one attribute), with ``B`` human-labelled items
whose classifier decisions give the confusion counts ``tp, fn, fp, tn`` and ``n_m = N - B`` items without a human
label of which the classifier calls ``s_m`` positive::

    s_h = tp + fn,  B = tp + fn + fp + tn
    p   ~ Beta(s_h + 1, B - s_h + 1)
    tpr ~ Beta(tp + 1, fn + 1)
    fpr ~ Beta(fp + 1, tn + 1)
    s_m ~ Binomial(n_m, tpr * p + fpr * (1 - p))

Two ways to the posterior (``fit_bcc_batch(..., method=...)``):

* ``exact`` (the default through ``auto``): importance sampling through ``q = tpr * p + fpr * (1 - p)``
  (``quantify.exact``), vectorised over cells, with a per-cell effective sample size and Monte-Carlo error of the
  mean; hundreds of cells take well under a second.
* ``nuts``: K cells in one compiled PyMC model with every variable of shape ``(K,)``, kept as a cross-check. The
  counts enter through ``pm.Data``, so a second fit of the same number of cells reuses the compiled model and
  sampler (``NUTS_CACHE``) instead of building a new one.

The cells share no parameter, so the joint posterior is the product of the per-cell posteriors and each cell's
draws follow the same distribution as a fit of that cell alone.

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
from typing import TYPE_CHECKING, Any

import arviz as az
import numpy as np
import xarray as xr

from countboard.quantify.errors import BCCWarning, NoHumanPositivesError, QuantifyInputError
from countboard.quantify.exact import ExactConfig, ExactResult, fit_exact

if TYPE_CHECKING:
    import pymc as pm


def import_pymc():
    """PyMC, imported on the first NUTS fit only: the exact posterior (the default) needs neither PyMC nor
    PyTensor, whose import warns about the BLAS it finds or not (a line the user cannot act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=BLAS_WARNING, category=UserWarning)
        import pymc

    return pymc

#: R-hat above this marks a NUTS posterior as not converged.
RHAT_MAX = 1.01
#: An exact (importance-sampling) posterior with a smaller effective sample size is not trusted.
ESS_MIN = 400
METHODS = ("auto", "exact", "nuts")


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
        draws: ``(K, chains * draws)`` posterior draws of ``p`` (resampled draws for ``exact``).
        rhat: ``(K,)`` largest rank-normalised split R-hat of ``p``, ``tpr`` and ``fpr`` in each cell (NaN for
            ``exact``, which has no chains, and for NUTS with one chain).
        ess: ``(K,)`` effective sample size: for ``nuts`` the smallest bulk ESS of ``p``, ``tpr`` and ``fpr``; for
            ``exact`` the Kish ESS of the importance weights.
        idata: The ArviZ InferenceData, dimension ``cell`` (for ``exact`` the resampled draws as one chain).
        method: ``exact`` or ``nuts``.
        mean: ``(K,)`` posterior mean of ``p`` (the weighted mean for ``exact``, the draws' mean for ``nuts``).
        mcse: ``(K,)`` Monte-Carlo standard error of ``mean``.
    """

    cells: list[str]
    draws: np.ndarray
    rhat: np.ndarray
    ess: np.ndarray
    idata: az.InferenceData
    method: str = "nuts"
    mean: np.ndarray | None = None
    mcse: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.mean is None:
            self.mean = self.draws.mean(axis=1)

    @property
    def converged(self) -> np.ndarray:
        """``(K,)`` True where R-hat is at most ``RHAT_MAX`` (``nuts``) or the ESS is at least ``ESS_MIN``
        (``exact``)."""
        if self.method == "exact":
            return self.ess >= ESS_MIN
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


#: Compiled NUTS models and their samplers by (number of cells, target_accept), reused by later fits.
NUTS_CACHE: dict[tuple[int, float], tuple[pm.Model, Any]] = {}
NUTS_CACHE_SIZE = 8
_DATA = ("a_p", "b_p", "a_t", "b_t", "a_f", "b_f", "n_m", "s_obs")


def _model_data(counts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The ``pm.Data`` values of the model: Beta parameters of the three rates and the binomial counts."""
    tp, fn, fp, tn, s_m, n_m = (counts[k].astype(np.float64) for k in ("tp", "fn", "fp", "tn", "s_m", "n_m"))
    s_h, b = tp + fn, tp + fn + fp + tn
    return {"a_p": s_h + 1, "b_p": b - s_h + 1, "a_t": tp + 1, "b_t": fn + 1, "a_f": fp + 1, "b_f": tn + 1,
            "n_m": n_m, "s_obs": s_m}


def _empty_model(k_cells: int) -> pm.Model:
    """The vectorised model of ``k_cells`` cells with its counts in ``pm.Data`` (set them with ``pm.set_data``)."""
    pm = import_pymc()
    with quiet_pymc(), pm.Model(coords={"cell": [str(i) for i in range(k_cells)]}) as model:
        d = {name: pm.Data(name, np.ones(k_cells), dims="cell") for name in _DATA}
        p = pm.Beta("p", alpha=d["a_p"], beta=d["b_p"], dims="cell")
        tpr = pm.Beta("tpr", alpha=d["a_t"], beta=d["b_t"], dims="cell")
        fpr = pm.Beta("fpr", alpha=d["a_f"], beta=d["b_f"], dims="cell")
        pm.Binomial("s_m", n=d["n_m"], p=tpr * p + fpr * (1 - p), observed=d["s_obs"], dims="cell")
    return model


def _nuts_model(counts: dict[str, np.ndarray], target_accept: float) -> tuple[pm.Model, Any]:
    """A compiled model of ``len(counts["tp"])`` cells with ``counts`` set, and its NUTS sampler, from the cache.

    The sampler's step size and mass matrix are reset, so a fit does not depend on the fits before it.
    """
    pm = import_pymc()
    key = (len(counts["tp"]), float(target_accept))
    if key not in NUTS_CACHE:
        model = _empty_model(key[0])
        with model, quiet_pymc():
            step = pm.NUTS(target_accept=key[1])
        if len(NUTS_CACHE) >= NUTS_CACHE_SIZE:
            NUTS_CACHE.pop(next(iter(NUTS_CACHE)))
        NUTS_CACHE[key] = (model, step)
    model, step = NUTS_CACHE[key]
    pm.set_data(_model_data(counts), model=model)
    step.reset_tuning()
    return model, step


#: PyTensor's warning when it compiles without a BLAS it can link (pip wheels): it recommends another installer, a
#: line the user cannot act on in a sweep; the BCC models are small and the measured timings include it.
BLAS_WARNING = ".*could not link to a BLAS.*"


@contextlib.contextmanager
def quiet_pymc():
    """PyMC's log lines below errors, and PyTensor's BLAS warning, off while a model is built or sampled."""
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=BLAS_WARNING, category=UserWarning)
            yield
    finally:
        logger.setLevel(level)


def sample_model(model: pm.Model, cfg: SamplerConfig, step: Any = None) -> az.InferenceData:
    """NUTS draws of ``model`` with ``cfg`` (and a compiled ``step`` to reuse, if given), without progress bars
    or PyMC's own log lines and checks."""
    pm = import_pymc()
    with model, quiet_pymc():
        kwargs = {"target_accept": cfg.target_accept} if step is None else {"step": step}
        return pm.sample(draws=cfg.draws, tune=cfg.tune, chains=cfg.chains, cores=cfg.cores, random_seed=cfg.seed,
                         progressbar=False, compute_convergence_checks=False, **kwargs)


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
                  sampler: SamplerConfig | None = None, allow_no_human_positives: bool = False,
                  method: str = "auto", exact: ExactConfig | None = None) -> BCCFit:
    """Fit K independent BCC cells at once.

    Args:
        tp, fn, fp, tn: ``(K,)`` confusion counts of the classifier against the human labels (positive = success).
        s_m, n_m: ``(K,)`` classifier positives among, and number of, items without a human label.
        cells: Names of the cells (default ``"0" .. "K-1"``).
        sampler: Sampler settings (default ``SamplerConfig()``: 2 chains of 1000 draws after 1000 tuning steps).
            ``exact`` returns ``chains * draws`` resampled draws per cell and takes its seed from here.
        allow_no_human_positives: Fit cells with ``tp + fn = 0`` (with a ``BCCWarning``) instead of raising
            ``NoHumanPositivesError``.
        method: ``exact`` (importance sampling, ``quantify.exact``), ``nuts`` (one compiled PyMC model) or
            ``auto``: exact, since every cell here is binary (multi-class cells go to ``fit_bcc_multiclass``).
        exact: Proposal and ESS settings of ``exact`` (its ``draws`` and ``seed`` come from ``sampler``).

    Returns:
        A ``BCCFit``; a ``BCCWarning`` names the cells whose R-hat exceeds 1.01 (``nuts``) or whose ESS stayed
        below the target (``exact``).

    Example:
        >>> fit = fit_bcc_batch([40, 10], [10, 5], [5, 20], [45, 65], [4500, 2500], [9900, 9900])
        >>> fit.method, fit.draws.shape, bool(fit.mcse.max() < 0.002)
        ('exact', (2, 2000), True)
    """
    if method not in METHODS:
        raise QuantifyInputError(f"BCC method must be one of {', '.join(METHODS)}, got {method!r}")
    counts = check_counts(tp, fn, fp, tn, s_m, n_m)
    k_cells = len(counts["tp"])
    cells = [str(c) for c in (cells if cells is not None else range(k_cells))]
    if len(cells) != k_cells or len(set(cells)) != k_cells:
        raise QuantifyInputError(f"need {k_cells} distinct cell names, got {cells[:5]}...")
    counts = validate_counts(*(counts[k] for k in ("tp", "fn", "fp", "tn", "s_m", "n_m")), cells=cells,
                             allow_no_human_positives=allow_no_human_positives)
    cfg = sampler or SamplerConfig()
    if method == "nuts":
        fit = _fit_nuts(counts, cells, cfg)
    else:
        base = exact or ExactConfig()
        ecfg = ExactConfig(**{**base.__dict__, "draws": cfg.draws * cfg.chains, "seed": cfg.seed})
        fit = _exact_fit(fit_exact(counts, ecfg), cells)
        low = np.flatnonzero(fit.ess < min(ecfg.target_ess, ESS_MIN))
        if low.size:
            worst = ", ".join(f"{cells[i]} ({fit.ess[i]:.0f})" for i in low[:5])
            warnings.warn(f"importance-sampling ESS below {ESS_MIN} in {low.size} of {k_cells} cell(s): {worst}; "
                          "raise ExactConfig.max_proposals or cross-check with method='nuts'", BCCWarning,
                          stacklevel=2)
    return fit


def _fit_nuts(counts: dict[str, np.ndarray], cells: list[str], cfg: SamplerConfig) -> BCCFit:
    model, step = _nuts_model(counts, cfg.target_accept)
    idata = sample_model(model, cfg, step).assign_coords(cell=cells)
    rhat, ess = _diagnostics(idata)
    k_cells = len(cells)
    draws = idata.posterior["p"].transpose("cell", "chain", "draw").values.reshape(k_cells, -1)
    mcse = az.mcse(idata, var_names=["p"])["p"].values
    fit = BCCFit(cells=cells, draws=draws, rhat=rhat, ess=ess, idata=idata, method="nuts", mcse=mcse)
    bad = np.flatnonzero(rhat > RHAT_MAX)
    if bad.size:
        worst = ", ".join(f"{cells[i]} ({rhat[i]:.3f})" for i in bad[:5])
        warnings.warn(f"R-hat above {RHAT_MAX} in {bad.size} of {k_cells} cell(s): {worst}; draw more samples "
                      "(SamplerConfig.draws / tune) before trusting these posteriors", BCCWarning, stacklevel=3)
    return fit


def _exact_fit(result: ExactResult, cells: list[str]) -> BCCFit:
    """A ``BCCFit`` from importance sampling: the resampled draws as one chain of the InferenceData."""
    posterior = {name: getattr(result, name).T[None] for name in ("p", "tpr", "fpr")}
    idata = az.from_dict(posterior=posterior, coords={"cell": cells}, dims={k: ["cell"] for k in posterior},
                         attrs={"method": "exact"})
    stats = {"ess": result.ess, "mcse": result.mcse, "mean": result.mean, "proposals": result.proposals}
    idata.add_groups(sample_stats=xr.Dataset({k: ("cell", v) for k, v in stats.items()}, coords={"cell": cells}))
    return BCCFit(cells=cells, draws=result.p, rhat=np.full(len(cells), np.nan), ess=result.ess, idata=idata,
                  method="exact", mean=result.mean, mcse=result.mcse)


def fit_bcc(tp: int, fn: int, fp: int, tn: int, s_m: int, n_m: int, *,
            sampler: SamplerConfig | None = None, allow_no_human_positives: bool = False,
            method: str = "auto") -> BCCFit:
    """Fit one BCC cell (a batch of one); see ``fit_bcc_batch``."""
    for name, value in dict(tp=tp, fn=fn, fp=fp, tn=tn, s_m=s_m, n_m=n_m).items():
        if np.ndim(value) != 0:
            raise QuantifyInputError(f"fit_bcc fits one cell: {name} must be a scalar; use fit_bcc_batch for K")
    return fit_bcc_batch(tp, fn, fp, tn, s_m, n_m, sampler=sampler,
                         allow_no_human_positives=allow_no_human_positives, method=method)


def bcc_posterior(tp: int, fn: int, fp: int, tn: int, s_m: int, n_m: int, *, draws: int = 1000,
                  chains: int = 2, seed: int | None = 0, tune: int | None = None, cores: int = 1,
                  allow_no_human_positives: bool = False, method: str = "auto") -> np.ndarray:
    """Posterior draws of the success rate ``p`` of one cell (``chains * draws`` values).

    See the module docstring for the model and the input rules; ``tune`` defaults to ``draws``. Use ``fit_bcc``
    to keep the R-hat and ESS with the draws.

    Example:
        >>> p = bcc_posterior(40, 10, 5, 45, 4500, 9900, draws=300)  # doctest: +SKIP
        >>> 0.4 < p.mean() < 0.6  # doctest: +SKIP
        True
    """
    cfg = SamplerConfig(draws=draws, tune=draws if tune is None else tune, chains=chains, cores=cores, seed=seed)
    return fit_bcc(tp, fn, fp, tn, s_m, n_m, sampler=cfg, allow_no_human_positives=allow_no_human_positives,
                   method=method).draws[0]


def bcc_posterior_batch(tp, fn, fp, tn, s_m, n_m, *, draws: int = 1000, chains: int = 2, seed: int | None = 0,
                        tune: int | None = None, cores: int = 1, allow_no_human_positives: bool = False,
                        method: str = "auto") -> np.ndarray:
    """``(K, chains * draws)`` posterior draws of ``p`` for K cells fitted in one model (see ``fit_bcc_batch``)."""
    cfg = SamplerConfig(draws=draws, tune=draws if tune is None else tune, chains=chains, cores=cores, seed=seed)
    return fit_bcc_batch(tp, fn, fp, tn, s_m, n_m, sampler=cfg, allow_no_human_positives=allow_no_human_positives,
                         method=method).draws
