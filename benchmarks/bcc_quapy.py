"""QuaPy's BayesianCC on BCC cells, run in QuaPy's own environment (called by ``bcc_speed.py``).

Reads ``{"cells": [[tp, fn, fp, tn, s_m, n_m], ...], "warmup": W, "samples": S}`` as JSON on stdin and prints
one JSON line per cell: ``{"seconds": ..., "mean": ...}``. Each cell is one run of BayesianCC's sampler
(``quapy.method._bayesian.sample_posterior_bayesianCC``, what ``BayesianCC.sample_from_posterior`` calls: a new
numpyro NUTS chain per cell) with the prior of the BCC report: a Dirichlet prior ``(B - s_h + 1, s_h + 1)`` on the
prevalence of (failure, success), so the model is the binary BCC model (the ``P(C|Y)`` rows get QuaPy's uniform
Dirichlet, updated by the confusion rows).

QuaPy's ``_bayesian`` module imports ``stan`` beside jax and numpyro, though BayesianCC samples with numpyro only;
an empty ``stan`` module stands in for it, so only ``quapy``, ``jax`` and ``numpyro`` need installing::

    /tmp/quapy-venv/bin/python -m pip install quapy jax numpyro
    echo '{"cells": [[40, 10, 5, 45, 4500, 9900]]}' | /tmp/quapy-venv/bin/python benchmarks/bcc_quapy.py
"""

from __future__ import annotations

import json
import sys
import time
import types

import numpy as np


def _stub_stan() -> None:
    stan = types.ModuleType("stan")
    stan.common = types.ModuleType("stan.common")
    sys.modules.setdefault("stan", stan)
    sys.modules.setdefault("stan.common", stan.common)


def main() -> None:
    _stub_stan()
    import jax.numpy as jnp
    from quapy.method import _bayesian

    job = json.load(sys.stdin)
    for tp, fn, fp, tn, s_m, n_m in job["cells"]:
        t0 = time.perf_counter()
        s_h, b = tp + fn, tp + fn + fp + tn
        # what BayesianCC.sample_from_posterior passes to the sampler, as jax arrays: with numpyro 0.22 and
        # jax 0.10 the numpy counts QuaPy builds fail the multinomial's support check inside the traced sampler
        samples = _bayesian.sample_posterior_bayesianCC(
            n_c_unlabeled=jnp.asarray([n_m - s_m, s_m], dtype=jnp.float32),
            n_y_and_c_labeled=jnp.asarray([[tn, fp], [fn, tp]], dtype=jnp.float32),  # rows: true, cols: predicted
            num_warmup=job.get("warmup", 500), num_samples=job.get("samples", 1000),
            alpha=np.array([b - s_h + 1, s_h + 1], dtype=float), seed=0)
        mean = float(np.asarray(samples[_bayesian.P_TEST_Y])[:, 1].mean())
        print(json.dumps({"seconds": time.perf_counter() - t0, "mean": mean}), flush=True)


if __name__ == "__main__":
    main()
