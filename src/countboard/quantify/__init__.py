"""Quantification of attribute control success: CC, Bayesian Classify & Count (BCC) and baselines.

- ``beta``: closed-form Beta quantities (CC / human posteriors, moment matching, JS divergence, ``P(X > Y)``,
  sample value).
- ``bcc``: the model, fitted for K cells at once (``fit_bcc_batch``) or one (``fit_bcc``, ``bcc_posterior``), with
  ``method="auto"`` (exact for binary cells), ``"exact"`` or ``"nuts"`` (one compiled PyMC model, reused).
- ``exact``: the binary posterior by importance sampling through ``q = tpr p + fpr (1 - p)`` (``ExactConfig``).
- ``pooling``: the pooled cell of groups labelled per group (population-weighted combination).
- ``cells``: from decisions and human labels to the per-cell report the ``bcc`` task logs.
- ``compare``: pairwise ``P(generator i > generator j)`` for one classifier.
- ``multiclass``: Dirichlet version for attributes with more than two labels.
- ``baselines``: ACC and a prediction-powered interval.

To add a quantification method: a module here with a pure function taking the cell counts
(``tp, fn, fp, tn, s_m, n_m``) and returning draws or an interval; raise ``QuantifyInputError`` for inputs it
cannot take; test it against a direct implementation on seeded inputs in ``tests/quantify/``; declare any metric
the ``bcc`` task logs from it in ``countboard/schema/bcc.yaml``.
"""

from countboard.quantify.baselines import acc_estimate, ppi_interval
from countboard.quantify.bcc import (
    BCCFit,
    SamplerConfig,
    bcc_posterior,
    bcc_posterior_batch,
    fit_bcc,
    fit_bcc_batch,
)
from countboard.quantify.beta import (
    beta_from_moments,
    beta_interval,
    beta_mean,
    beta_var,
    cc_posterior,
    js_divergence_beta,
    prob_greater,
    sample_value,
)
from countboard.quantify.cells import (
    CellCounts,
    cell_report,
    counts_from_labels,
    credible_interval,
    report_cells,
)
from countboard.quantify.compare import generator_comparison, pairwise_prob_greater
from countboard.quantify.errors import BCCWarning, NoHumanPositivesError, QuantifyInputError
from countboard.quantify.exact import ExactConfig
from countboard.quantify.multiclass import MultiClassFit, fit_bcc_multiclass

__all__ = [
    "BCCFit", "BCCWarning", "CellCounts", "ExactConfig", "MultiClassFit", "NoHumanPositivesError", "QuantifyInputError",
    "SamplerConfig",
    "acc_estimate", "bcc_posterior", "bcc_posterior_batch", "beta_from_moments", "beta_interval", "beta_mean",
    "beta_var", "cc_posterior", "cell_report", "counts_from_labels", "credible_interval", "fit_bcc", "fit_bcc_batch",
    "fit_bcc_multiclass", "generator_comparison", "js_divergence_beta", "pairwise_prob_greater", "ppi_interval",
    "prob_greater", "report_cells", "sample_value",
]
