"""Multi-class BCC: prevalence of L labels from a classifier calibrated on human labels.

With the ``(L, L)`` confusion matrix ``C`` of the ``B`` labelled items (row: human label, column: classifier
label) and the classifier's label counts ``s`` on the ``n_m`` unlabelled items::

    pi       ~ Dirichlet(C.sum(axis=1) + 1)          prevalence of the human labels
    theta[l] ~ Dirichlet(C[l] + 1)                   classifier label given human label l
    s        ~ Multinomial(n_m, pi @ theta)

With two labels ordered ``[failure, success]`` (``C = [[tn, fp], [fn, tp]]``) this is the binary model of ``bcc``.

Two ways to the posterior (``method``), as for the binary cells:

* ``exact`` (the default through ``auto``): importance sampling through ``q = pi @ theta`` in numpy
  (``quantify.exact_multiclass``), with the Kish ESS and the Monte-Carlo error of each prevalence's mean; nothing
  is compiled and PyMC is not imported.
* ``nuts``: PyMC's NUTS. The counts enter the model through ``pm.Data``: fits with the same number of labels reuse
  one compiled model and NUTS sampler (``MC_CACHE``), with its step size and mass matrix reset, instead of
  compiling a new one each time.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import arviz as az
import numpy as np

from countboard.quantify.bcc import (
    ESS_MIN,
    METHODS,
    NUTS_CACHE_SIZE,
    RHAT_MAX,
    SamplerConfig,
    import_pymc,
    quiet_pymc,
    sample_model,
)
from countboard.quantify.errors import BCCWarning, QuantifyInputError
from countboard.quantify.exact import ExactConfig
from countboard.quantify.exact_multiclass import fit_exact_multiclass

if TYPE_CHECKING:
    import pymc as pm


@dataclass
class MultiClassFit:
    """Draws of the prevalence vector and their diagnostics.

    Attributes:
        labels: Label names, in the order of the last axis of ``draws``.
        draws: ``(chains * draws, L)`` posterior draws of ``pi``.
        rhat: ``(L,)`` R-hat of each prevalence (NaN for ``exact`` and for NUTS with one chain).
        ess: ``(L,)`` bulk ESS of each prevalence (``nuts``) or the Kish ESS of the importance weights (``exact``).
        idata: The ArviZ InferenceData (for ``exact`` the resampled draws as one chain).
        method: ``exact`` or ``nuts``.
        mean: ``(L,)`` posterior means (the weighted means for ``exact``, the draws' means for ``nuts``).
        mcse: ``(L,)`` Monte-Carlo standard errors of ``mean``.
    """

    labels: list[str]
    draws: np.ndarray
    rhat: np.ndarray
    ess: np.ndarray
    idata: az.InferenceData
    method: str = "nuts"
    mean: np.ndarray | None = None
    mcse: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.mean is None:
            self.mean = self.draws.mean(axis=0)


def _validate(confusion, s_unlabelled, labels) -> tuple[np.ndarray, np.ndarray, list[str]]:
    conf = np.asarray(confusion)
    s = np.asarray(s_unlabelled)
    if conf.ndim != 2 or conf.shape[0] != conf.shape[1] or conf.shape[0] < 2:
        raise QuantifyInputError(f"confusion must be a square (L, L) matrix with L >= 2, got shape {conf.shape}")
    if s.shape != (conf.shape[0],):
        raise QuantifyInputError(f"s_unlabelled must hold one count per label ({conf.shape[0]}), got {s.shape}")
    for name, arr in (("confusion", conf), ("s_unlabelled", s)):
        if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.round(arr)):
            raise QuantifyInputError(f"{name} must hold non-negative whole counts")
    if conf.sum() == 0:
        raise QuantifyInputError("the confusion matrix is empty (B = 0): label a random subset of the items")
    if s.sum() == 0:
        raise QuantifyInputError("no item without a human label (n_m = 0): use the Dirichlet of the human counts")
    names = [str(x) for x in (labels if labels is not None else range(conf.shape[0]))]
    if len(names) != conf.shape[0]:
        raise QuantifyInputError(f"{len(names)} label names for {conf.shape[0]} labels")
    empty = [names[i] for i in np.flatnonzero(conf.sum(axis=1) == 0)]
    if empty:
        warnings.warn(f"no human label {empty} among the calibration labels: their confusion rows keep the "
                      "uniform Dirichlet prior", BCCWarning, stacklevel=3)
    return conf.astype(np.int64), s.astype(np.int64), names


#: Compiled multi-class models and their NUTS samplers by (number of labels, target_accept).
MC_CACHE: dict[tuple[int, float], tuple[pm.Model, Any]] = {}


def _cached_model(conf: np.ndarray, s: np.ndarray, target_accept: float) -> tuple[pm.Model, Any]:
    """The compiled model for ``L`` labels with these counts set, and its sampler (tuning reset)."""
    pm = import_pymc()  # imported on the first fit (bcc.import_pymc says why)
    key = (conf.shape[0], float(target_accept))
    if key not in MC_CACHE:
        n_labels = key[0]
        coords = {"label": [str(i) for i in range(n_labels)], "predicted": [str(i) for i in range(n_labels)]}
        with quiet_pymc(), pm.Model(coords=coords) as model:
            a_pi = pm.Data("a_pi", np.ones(n_labels), dims="label")
            a_theta = pm.Data("a_theta", np.ones((n_labels, n_labels)), dims=("label", "predicted"))
            n_m = pm.Data("n_m", 1.0)
            s_obs = pm.Data("s_obs", np.ones(n_labels), dims="predicted")
            pi = pm.Dirichlet("pi", a=a_pi, dims="label")
            theta = pm.Dirichlet("theta", a=a_theta, dims=("label", "predicted"))
            pm.Multinomial("s_m", n=n_m, p=pm.math.dot(pi, theta), observed=s_obs, dims="predicted")
            with quiet_pymc():
                step = pm.NUTS(target_accept=key[1])
        if len(MC_CACHE) >= NUTS_CACHE_SIZE:
            MC_CACHE.pop(next(iter(MC_CACHE)))
        MC_CACHE[key] = (model, step)
    model, step = MC_CACHE[key]
    pm.set_data({"a_pi": conf.sum(axis=1).astype(np.float64) + 1, "a_theta": conf.astype(np.float64) + 1,
                 "n_m": float(s.sum()), "s_obs": s.astype(np.float64)}, model=model)
    step.reset_tuning()
    return model, step


def fit_bcc_multiclass(confusion, s_unlabelled, *, labels: Sequence[str] | None = None,
                       sampler: SamplerConfig | None = None, method: str = "auto",
                       exact: ExactConfig | None = None) -> MultiClassFit:
    """Posterior of the label prevalences (see the module docstring for the model).

    Args:
        confusion: ``(L, L)`` counts on the labelled items, rows = human label, columns = classifier label.
        s_unlabelled: ``(L,)`` classifier label counts on the items without a human label.
        labels: Label names (default ``"0" .. "L-1"``).
        sampler: Sampler settings; ``exact`` returns ``chains * draws`` resampled draws and takes its seed here.
        method: ``exact`` (importance sampling, ``quantify.exact_multiclass``), ``nuts`` (PyMC) or ``auto``
            (exact).
        exact: Proposal and ESS settings of ``exact`` (its ``draws`` and ``seed`` come from ``sampler``).

    Example:
        >>> fit = fit_bcc_multiclass([[30, 5, 5], [4, 20, 6], [2, 3, 25]], [3000, 3000, 3900],
        ...                          sampler=SamplerConfig(draws=200))
        >>> fit.method, fit.draws.shape, bool(fit.mcse.max() < 0.003)
        ('exact', (400, 3), True)
    """
    if method not in METHODS:
        raise QuantifyInputError(f"BCC method must be one of {', '.join(METHODS)}, got {method!r}")
    conf, s, names = _validate(confusion, s_unlabelled, labels)
    cfg = sampler or SamplerConfig()
    if method != "nuts":
        return _fit_exact(conf, s, names, cfg, exact or ExactConfig())
    model, step = _cached_model(conf, s, cfg.target_accept)
    idata = sample_model(model, cfg, step).assign_coords(label=names, predicted=names)
    draws = idata.posterior["pi"].stack(sample=("chain", "draw")).transpose("sample", "label").values
    ess = az.ess(idata, var_names=["pi"])["pi"].values
    rhat = az.rhat(idata, var_names=["pi"])["pi"].values if cfg.chains > 1 else np.full(len(names), np.nan)
    if np.any(rhat > RHAT_MAX):
        warnings.warn(f"R-hat of the prevalences {np.round(rhat, 3).tolist()} exceeds {RHAT_MAX}; draw more "
                      "samples", BCCWarning, stacklevel=2)
    mcse = az.mcse(idata, var_names=["pi"])["pi"].values
    return MultiClassFit(labels=names, draws=draws, rhat=rhat, ess=ess, idata=idata, method="nuts", mcse=mcse)


def _fit_exact(conf: np.ndarray, s: np.ndarray, names: list[str], cfg: SamplerConfig,
               base: ExactConfig) -> MultiClassFit:
    """A ``MultiClassFit`` by importance sampling: the resampled draws as one chain of the InferenceData."""
    ecfg = ExactConfig(**{**base.__dict__, "draws": cfg.draws * cfg.chains, "seed": cfg.seed})
    result = fit_exact_multiclass(conf, s, ecfg)
    idata = az.from_dict(posterior={"pi": result.pi[None]}, coords={"label": names}, dims={"pi": ["label"]},
                         attrs={"method": "exact"})
    ess = np.full(len(names), result.ess)
    if result.ess < min(ecfg.target_ess, ESS_MIN):
        warnings.warn(f"importance-sampling ESS {result.ess:.0f} below {ESS_MIN} after {result.proposals} "
                      "proposals; raise ExactConfig.max_proposals or cross-check with method='nuts'", BCCWarning,
                      stacklevel=3)
    return MultiClassFit(labels=names, draws=result.pi, rhat=np.full(len(names), np.nan), ess=ess, idata=idata,
                         method="exact", mean=result.mean, mcse=result.mcse)
