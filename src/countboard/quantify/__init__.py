"""Quantification of attribute control success: CC, Bayesian Classify & Count (BCC) and baselines.

- ``beta``: closed-form Beta quantities (CC / human posteriors, moment matching, JS divergence, ``P(X > Y)``,
  sample value).
- ``bcc``: the model, fitted for K cells at once (``fit_bcc_batch``) or one (``fit_bcc``, ``bcc_posterior``), with
  ``method="auto"`` (exact for binary cells), ``"exact"`` or ``"nuts"`` (one compiled PyMC model, reused).
- ``exact``: the binary posterior by importance sampling through ``q = tpr p + fpr (1 - p)`` (``ExactConfig``).
- ``pooling``: the pooled cell of groups labelled per group (population-weighted combination).
- ``cells``: from decisions and human labels to the per-cell report the ``bcc`` task logs.
- ``compare``: pairwise ``P(generator i > generator j)`` for one classifier; ``comparison_runs`` reads the cells of
  the tasks the domains declare (``compared.ComparedTask``) and logs one comparison run per group.
- ``multiclass``: Dirichlet version for attributes with more than two labels (``method="auto"``: exact, or
  ``"nuts"``); ``exact_multiclass``: its posterior by importance sampling through ``q = pi @ theta``.
- ``baselines``: ACC and a prediction-powered interval.

To add a quantification method: a module here with a pure function taking the cell counts
(``tp, fn, fp, tn, s_m, n_m``) and returning draws or an interval; raise ``QuantifyInputError`` for inputs it
cannot take; test it against a direct implementation on seeded inputs in ``tests/quantify/``; declare any metric
the ``bcc`` task logs from it in ``countboard/schema/bcc.yaml``.
"""

import importlib

# Loaded on first use: ``bcc`` and ``baselines`` import PyMC and ArviZ (seconds), which light readers of this
# package (``compared``, ``beta``) and ``countboard --help`` must not pay for.
_LAZY = {
    "acc_estimate": "baselines", "ppi_interval": "baselines",
    "BCCFit": "bcc", "SamplerConfig": "bcc", "bcc_posterior": "bcc", "bcc_posterior_batch": "bcc", "fit_bcc": "bcc",
    "fit_bcc_batch": "bcc",
    "beta_from_interval": "beta", "beta_from_moments": "beta", "beta_interval": "beta", "beta_mean": "beta", "beta_var": "beta",
    "cc_posterior": "beta", "js_divergence_beta": "beta", "prob_greater": "beta", "sample_value": "beta",
    "CellCounts": "cells", "cell_report": "cells", "counts_from_labels": "cells", "credible_interval": "cells",
    "report_cells": "cells",
    "generator_comparison": "compare", "pairwise_prob_greater": "compare",
    "BCCWarning": "errors", "NoHumanPositivesError": "errors", "QuantifyInputError": "errors",
    "ExactConfig": "exact",
    "MultiClassFit": "multiclass", "fit_bcc_multiclass": "multiclass",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
