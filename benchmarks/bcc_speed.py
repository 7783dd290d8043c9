"""BCC speed: 252 cells (7 generators x 3 classifiers x 12 prompt types) in one batched model vs a per-cell loop.

Both sides use the same sampler settings and run in this one process, side by side. Prints wall-clock times,
the speed-up, and how far the batched posterior means are from the per-cell ones.

    .venv/bin/python benchmarks/bcc_speed.py                  # all 252 cells in both
    .venv/bin/python benchmarks/bcc_speed.py --loop-cells 24  # loop over the first 24 cells only (quick look)
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import numpy as np

from countboard.acs.datasets.simulated import simulate_counts
from countboard.quantify import BCCWarning, SamplerConfig, fit_bcc, fit_bcc_batch

GENERATORS, CLASSIFIERS, PROMPT_TYPES = 7, 3, 12


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--loop-cores", type=int, default=1,
                        help="cores of each per-cell fit (1: no process start-up per cell, the faster choice)")
    parser.add_argument("--loop-cells", type=int, default=None, help="loop over only the first N cells")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counts, names = make_cells(args.seed)
    cfg = SamplerConfig(draws=args.draws, tune=args.tune, chains=args.chains, cores=args.cores, seed=args.seed)
    cols = [np.array([getattr(c, f) for c in counts]) for f in ("tp", "fn", "fp", "tn", "s_m", "n_m")]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BCCWarning)
        t0, c0 = time.perf_counter(), cpu_seconds()
        batch = fit_bcc_batch(*cols, cells=names, sampler=cfg)
        t_batch, c_batch = time.perf_counter() - t0, cpu_seconds() - c0
    print(f"batched: {len(counts)} cells in {t_batch:.1f} s wall, {c_batch:.1f} s CPU  (draws={cfg.draws}, tune={cfg.tune}, "
          f"chains={cfg.chains}, cores={cfg.cores}); R-hat max {np.nanmax(batch.rhat):.4f}, "
          f"cells with R-hat > 1.01: {int(np.sum(batch.rhat > 1.01))}, ESS min {batch.ess.min():.0f}, "
          f"BCC warnings: {len(caught)}")

    n_loop = len(counts) if args.loop_cells is None else min(args.loop_cells, len(counts))
    loop_means, loop_rhat = [], []
    t0, c0 = time.perf_counter(), cpu_seconds()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BCCWarning)
        for k in range(n_loop):
            c = counts[k]
            fit = fit_bcc(c.tp, c.fn, c.fp, c.tn, c.s_m, c.n_m,
                          sampler=SamplerConfig(**{**cfg.__dict__, "cores": args.loop_cores,
                                                   "seed": args.seed + 1 + k}))
            loop_means.append(fit.draws[0].mean())
            loop_rhat.append(fit.rhat[0])
    t_loop, c_loop = time.perf_counter() - t0, cpu_seconds() - c0
    per_cell = t_loop / n_loop
    t_loop_all = per_cell * len(counts)
    diff = np.abs(batch.draws[:n_loop].mean(axis=1) - np.array(loop_means))
    label = "measured" if n_loop == len(counts) else f"extrapolated from {n_loop} cells"
    print(f"loop: {n_loop} cells in {t_loop:.1f} s wall, {c_loop:.1f} s CPU ({per_cell:.2f} s per cell); all {len(counts)} cells: "
          f"{t_loop_all:.1f} s ({label}); loop cores {args.loop_cores}; loop R-hat max {np.nanmax(loop_rhat):.4f}")
    print(f"speed-up batched vs loop: {t_loop_all / t_batch:.1f}x wall, "
          f"{c_loop * len(counts) / n_loop / c_batch:.1f}x CPU")
    print(f"|batched mean - loop mean|: max {diff.max():.4f}, mean {diff.mean():.4f}, "
          f"cells within 0.005: {int(np.sum(diff <= 0.005))}/{n_loop}")


if __name__ == "__main__":
    main()
