"""BCC speed: 252 binary cells (7 generators x 3 classifiers x 12 prompt types, B = 100, N = 10,000), side by side.

- exact: importance sampling through q (``fit_bcc_batch(method="exact")``), all 252 cells; target <= 2 s;
- NUTS: the batched PyMC model on the same counts (all cells, or the first ``--nuts-cells``), as the cross-check:
  target |exact mean - NUTS mean| <= 0.003 on every cell;
- QuaPy's BayesianCC (numpyro NUTS, in its own environment ``--quapy-python``, via ``bcc_quapy.py``) on the first
  ``--quapy-cells`` cells: target exact >= 50x faster per cell;
- optionally (``--loop-cells N``) a per-cell NUTS loop, the cost before the batched model;
- multi-class (Dirichlet) cells, 3 labels (``--mc-cells``, 0 to skip): the exact method
  (``fit_bcc_multiclass(method="exact")``, the default) and PyMC's NUTS on the same cells, one cell at a time as
  the ``text_acs`` task fits them; per cell time, the speed-up, and the agreement of the means.

    python benchmarks/bcc_speed.py --quick         # exact on 252, NUTS on 24 cells, QuaPy on 4, 6 multi-class
    python benchmarks/bcc_speed.py                 # NUTS on all 252 cells (2 x 4000 draws), QuaPy on 12, 21 mc
    python benchmarks/bcc_speed.py --nuts-cells 0 --quapy-cells 0 --mc-cells 21   # the multi-class part only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from countboard.acs.datasets.simulated import simulate_counts
from countboard.quantify import BCCWarning, SamplerConfig, fit_bcc, fit_bcc_batch, fit_bcc_multiclass

GENERATORS, CLASSIFIERS, PROMPT_TYPES = 7, 3, 12
FIELDS = ("tp", "fn", "fp", "tn", "s_m", "n_m")
QUAPY_PYTHON = "/tmp/quapy-venv/bin/python"


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the chains run in children when cores > 1)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def make_cells(seed: int):
    rng = np.random.default_rng(seed)
    k = GENERATORS * CLASSIFIERS * PROMPT_TYPES
    p = np.repeat(rng.uniform(0.1, 0.9, GENERATORS * PROMPT_TYPES), CLASSIFIERS)
    tpr = rng.uniform(0.55, 0.98, k)
    fpr = rng.uniform(0.02, 0.4, k)
    counts = simulate_counts(p, tpr, fpr, n_human=100, n_total=10_000, rng=rng)
    names = [f"g{g}/c{c}/t{t:02d}" for g in range(GENERATORS) for t in range(PROMPT_TYPES) for c in range(CLASSIFIERS)]
    return counts, names


def timed(fn):
    """``(result, wall seconds, CPU seconds)`` of ``fn()``, with BCC warnings kept and counted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BCCWarning)
        t0, c0 = time.perf_counter(), cpu_seconds()
        out = fn()
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    if caught:
        print(f"  ({len(caught)} BCC warning(s): {str(caught[0].message)[:120]})")
    return out, wall, cpu


def run_exact(cols, names, seed: int):
    fit_bcc_batch(*(c[:2] for c in cols), sampler=SamplerConfig(seed=seed))  # imports and first calls
    fit, wall, cpu = timed(lambda: fit_bcc_batch(*cols, cells=names, method="exact", sampler=SamplerConfig(seed=seed)))
    proposals = fit.idata.sample_stats["proposals"].values
    print(f"exact: {len(names)} cells in {wall:.2f} s wall, {cpu:.2f} s CPU ({1000 * wall / len(names):.1f} ms per "
          f"cell; target <= 2 s); ESS min {fit.ess.min():.0f}, MC error of the mean max {fit.mcse.max():.5f}, "
          f"proposals per cell median {np.median(proposals):.0f}, max {proposals.max():.0f}")
    return fit, wall


def make_mc_cells(k: int, seed: int, n_labels: int = 3, n_human: int = 100, n_total: int = 10_000):
    """``k`` multi-class cells as a text generator's requested labels give them: the requested label is the
    prevalent one (``pi`` ~ Dirichlet with 6 on it, 1 elsewhere), a classifier right about 80-95% of the time."""
    rng = np.random.default_rng(seed)
    cells = []
    for i in range(k):
        alpha = np.ones(n_labels)
        alpha[i % n_labels] = 6.0
        pi = rng.dirichlet(alpha)
        theta = np.array([rng.dirichlet(np.where(np.arange(n_labels) == r, 1.0, 0.0) * rng.uniform(8, 40) + 1)
                          for r in range(n_labels)])
        truth = rng.choice(n_labels, size=n_total, p=pi)
        decided = (rng.random(n_total)[:, None] < np.cumsum(theta[truth], axis=1)).argmax(axis=1)
        conf = np.zeros((n_labels, n_labels), dtype=int)
        np.add.at(conf, (truth[:n_human], decided[:n_human]), 1)
        cells.append((conf, np.bincount(decided[n_human:], minlength=n_labels)))
    return cells


def run_multiclass(args) -> None:
    """Exact and NUTS on the same multi-class cells, side by side (one cell per fit, as text_acs fits them)."""
    cells = make_mc_cells(args.mc_cells, args.seed)
    cfg = SamplerConfig(seed=args.seed)  # the task's defaults: 2 chains x (1000 tune + 1000 draws)
    fit_bcc_multiclass(*cells[0], method="exact", sampler=cfg)  # imports and first calls
    exact, wall_e, cpu_e = timed(lambda: [fit_bcc_multiclass(c, s, method="exact", sampler=cfg) for c, s in cells])
    first, wall_first, cpu_first = timed(lambda: fit_bcc_multiclass(*cells[0], method="nuts", sampler=cfg))
    nuts, wall_n, cpu_n = timed(lambda: [fit_bcc_multiclass(c, s, method="nuts", sampler=cfg) for c, s in cells])
    k = len(cells)
    diff = np.array([np.abs(e.mean - n.mean).max() for e, n in zip(exact, nuts, strict=True)])
    noise = np.array([np.max(np.abs(e.mean - n.mean) / np.hypot(e.mcse, n.mcse)) for e, n in zip(exact, nuts,
                                                                                                   strict=True)])
    ess = np.array([e.ess.min() for e in exact])
    print(f"multi-class, {k} cells of 3 labels (B = 100, N = 10,000), one fit per cell:")
    print(f"  exact: {wall_e:.2f} s wall, {cpu_e:.2f} s CPU, {1000 * wall_e / k:.0f} ms per cell; ESS min "
          f"{ess.min():.0f}, MC error max {max(e.mcse.max() for e in exact):.5f}")
    print(f"  NUTS (2 x 1000 draws after 1000): first fit {wall_first:.1f} s wall, {cpu_first:.1f} s CPU (builds "
          f"and compiles the model; PyTensor's cache as found), then {wall_n:.1f} s wall, {cpu_n:.1f} s CPU, "
          f"{wall_n / k:.2f} s per cell; R-hat max {max(np.nanmax(n.rhat) for n in nuts):.4f}")
    print(f"  per cell, exact vs NUTS: {1000 * wall_e / k:.0f} ms vs {1000 * wall_n / k:.0f} ms wall: "
          f"{wall_n / wall_e:.0f}x faster ({cpu_n / cpu_e:.0f}x in CPU; {(wall_n + wall_first) / wall_e:.0f}x with "
          "the compiling first fit)")
    print(f"  |exact mean - NUTS mean|: max {diff.max():.4f} over {k} cells x 3 labels; largest |diff| / combined "
          f"MC error {noise.max():.2f}")


def run_nuts(cols, names, exact, args) -> None:
    k = len(names) if args.nuts_cells is None else min(args.nuts_cells, len(names))
    if k == 0:
        return
    cfg = SamplerConfig(draws=args.draws, tune=args.tune, chains=args.chains, cores=args.cores, seed=args.seed)
    fit, wall, cpu = timed(lambda: fit_bcc_batch(*(c[:k] for c in cols), cells=names[:k], method="nuts",
                                                 sampler=cfg))
    diff = np.abs(exact.mean[:k] - fit.mean)
    noise = np.sqrt(exact.mcse[:k] ** 2 + fit.mcse**2)
    print(f"NUTS (batched, {cfg.chains} x {cfg.draws} draws after {cfg.tune}): {k} cells in {wall:.1f} s wall, "
          f"{cpu:.1f} s CPU; R-hat max {np.nanmax(fit.rhat):.4f}, bulk ESS min {fit.ess.min():.0f}, "
          f"MC error max {fit.mcse.max():.5f}")
    print(f"|exact mean - NUTS mean| over {k} cells: max {diff.max():.4f}, mean {diff.mean():.4f}; within 0.003: "
          f"{int(np.sum(diff <= 0.003))}/{k}; largest |diff| / combined MC error {np.max(diff / noise):.2f}")


def run_quapy(cols, exact, exact_per_cell: float, args) -> None:
    python = Path(args.quapy_python)
    if not args.quapy_cells:
        return
    if not python.is_file():
        print(f"QuaPy: skipped ({python} not found; create it with: python -m venv /tmp/quapy-venv && "
              "/tmp/quapy-venv/bin/pip install quapy jax numpyro)")
        return
    k = args.quapy_cells
    job = {"cells": [[int(c[i]) for c in cols] for i in range(k)], "warmup": 500, "samples": 1000}
    worker = Path(__file__).with_name("bcc_quapy.py")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ""}
    t0 = time.perf_counter()
    out = subprocess.run([str(python), str(worker)], input=json.dumps(job), capture_output=True, text=True,
                         env=env, check=False)
    total = time.perf_counter() - t0
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if len(rows) != k:
        print(f"QuaPy: failed ({out.returncode}): {out.stderr.strip()[-400:]}")
        return
    seconds = np.array([r["seconds"] for r in rows])
    means = np.array([r["mean"] for r in rows])
    diff = np.abs(means - exact.mean[:k])
    later = seconds[1:] if k > 1 else seconds
    print(f"QuaPy BayesianCC (numpyro NUTS, 500 warm-up + 1000 draws, report prior): {k} cells, per cell "
          f"{seconds.mean():.2f} s (first {seconds[0]:.2f} s, later ones {later.mean():.2f} s; subprocess "
          f"{total:.1f} s with imports); |QuaPy mean - exact mean| max {diff.max():.4f}, mean {diff.mean():.4f}")
    print(f"per cell, exact vs QuaPy: {1000 * exact_per_cell:.1f} ms vs {1000 * later.mean():.0f} ms: "
          f"{later.mean() / exact_per_cell:.0f}x faster (target >= 50x)")


def run_loop(counts, batch_means, args) -> None:
    n_loop = min(args.loop_cells, len(counts))
    means = []
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        for k in range(n_loop):
            c = counts[k]
            cfg = SamplerConfig(draws=1000, tune=1000, chains=2, cores=1, seed=args.seed + 1 + k)
            means.append(fit_bcc(c.tp, c.fn, c.fp, c.tn, c.s_m, c.n_m, sampler=cfg, method="nuts").draws[0].mean())
    wall = time.perf_counter() - t0
    diff = np.abs(np.array(means) - batch_means[:n_loop])
    print(f"per-cell NUTS loop (2 x 1000 draws, model reused): {n_loop} cells in {wall:.1f} s "
          f"({wall / n_loop:.2f} s per cell); |loop - exact| max {diff.max():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="NUTS on 24 cells, QuaPy on 4 (unless given)")
    parser.add_argument("--nuts-cells", type=int, default=None, help="NUTS cross-check on the first K cells")
    parser.add_argument("--draws", type=int, default=4000, help="NUTS draws per chain (precise cross-check)")
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--quapy-python", default=QUAPY_PYTHON, help="python of an environment with quapy")
    parser.add_argument("--quapy-cells", type=int, default=None)
    parser.add_argument("--loop-cells", type=int, default=0, help="also time a per-cell NUTS loop on N cells")
    parser.add_argument("--mc-cells", type=int, default=None, help="multi-class cells, exact and NUTS (0: skip)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.nuts_cells is None and args.quick:
        args.nuts_cells = 24
    if args.quapy_cells is None:
        args.quapy_cells = 4 if args.quick else 12
    if args.mc_cells is None:
        args.mc_cells = 6 if args.quick else 21
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f} at start")
    counts, names = make_cells(args.seed)
    cols = [np.array([getattr(c, f) for c in counts]) for f in FIELDS]
    exact, wall = run_exact(cols, names, args.seed)
    run_nuts(cols, names, exact, args)
    run_quapy(cols, exact, wall / len(names), args)
    if args.loop_cells:
        run_loop(counts, exact.mean, args)
    if args.mc_cells:
        run_multiclass(args)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
