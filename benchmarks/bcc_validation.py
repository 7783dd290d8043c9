"""BCC validation: simulated cells with known rates, and the GeckoNum human annotations as real data.

Simulation: 1,000 cells with known p, tpr, fpr, B = 100 human labels and N = 10,000 items; reports how often the
90% BCC interval covers the true p (target for the exact method: 0.88-0.92), and the error of BCC, CC, the human
labels alone, ACC and PPI.

Real data (GeckoNum, 7 generators x Tasks 1-3): the majority of the 5 annotators is the oracle; one randomly
chosen annotator's answer per unit is a cheap, noisy "classifier". BCC gets the oracle on 100 random units per
(generator, task) and its interval is compared with the oracle rate over all units; repeated with several
random draws of the 100.

    .venv/bin/python benchmarks/bcc_validation.py                     # both parts, exact BCC
    .venv/bin/python benchmarks/bcc_validation.py --quick             # 300 simulated cells, 2 draws of the real data
    .venv/bin/python benchmarks/bcc_validation.py --part sim --method nuts --cells 240
    .venv/bin/python benchmarks/bcc_validation.py --part real --data /work/shared/data/geckonum
"""

from __future__ import annotations

import argparse
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.acs.datasets.simulated import simulate_counts
from countboard.quantify import (
    BCCWarning,
    CellCounts,
    SamplerConfig,
    acc_estimate,
    beta_interval,
    counts_from_labels,
    fit_bcc_batch,
    ppi_interval,
)
from countboard.quantify.errors import QuantifyInputError

COUNT_FIELDS = ("tp", "fn", "fp", "tn", "s_m", "n_m")


def evaluate(counts: list[CellCounts], truth: np.ndarray, sampler: SamplerConfig, method: str) -> pd.DataFrame:
    """Per cell: BCC, CC, human-only, ACC and PPI estimates and intervals against ``truth``."""
    cols = [np.array([getattr(c, f) for c in counts]) for f in COUNT_FIELDS]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BCCWarning)
        t0 = time.perf_counter()
        fit = fit_bcc_batch(*cols, sampler=sampler, method=method, allow_no_human_positives=True)
        seconds = time.perf_counter() - t0
    quality = (f"ESS min {fit.ess.min():.0f}, MC error max {fit.mcse.max():.5f}" if fit.method == "exact" else
               f"R-hat max {np.nanmax(fit.rhat):.4f}, {int(np.sum(fit.rhat > 1.01))} cells above 1.01")
    print(f"  BCC ({fit.method}) fit of {len(counts)} cells: {seconds:.1f} s, {quality}, {len(caught)} warnings")
    rows = []
    for k, c in enumerate(counts):
        lo, hi = np.quantile(fit.draws[k], [0.05, 0.95])
        h_lo, h_hi = beta_interval(c.s_human + 1, c.n_human - c.s_human + 1)
        cc_lo, cc_hi = beta_interval(c.s_cc + 1, c.n_total - c.s_cc + 1)
        try:
            acc = acc_estimate(*(getattr(c, f) for f in COUNT_FIELDS))
        except QuantifyInputError:
            acc = np.nan
        ppi, ppi_lo, ppi_hi = ppi_interval(*(getattr(c, f) for f in COUNT_FIELDS))
        rows.append(dict(truth=truth[k], bcc=fit.mean[k], bcc_lo=lo, bcc_hi=hi,
                         cc=(c.s_cc + 1) / (c.n_total + 2), cc_lo=cc_lo, cc_hi=cc_hi,
                         human=(c.s_human + 1) / (c.n_human + 2), human_lo=h_lo, human_hi=h_hi,
                         acc=acc, ppi=ppi, ppi_lo=ppi_lo, ppi_hi=ppi_hi, rhat=fit.rhat[k]))
    return pd.DataFrame(rows)


def report(df: pd.DataFrame) -> pd.DataFrame:
    """Coverage of the 90% intervals and mean absolute error of each method."""
    out = {}
    for m in ("bcc", "cc", "human", "ppi", "acc"):
        cov = (np.mean((df[f"{m}_lo"] <= df.truth) & (df.truth <= df[f"{m}_hi"]))
               if f"{m}_lo" in df else np.nan)
        width = (df[f"{m}_hi"] - df[f"{m}_lo"]).mean() if f"{m}_lo" in df else np.nan
        out[m] = dict(coverage_90=cov, mean_width=width, mae=np.nanmean(np.abs(df[m] - df.truth)),
                      bias=np.nanmean(df[m] - df.truth))
    return pd.DataFrame(out).T


def simulation(n_cells: int, sampler: SamplerConfig, seed: int, method: str) -> None:
    rng = np.random.default_rng(seed)
    p, tpr, fpr = rng.uniform(0.05, 0.95, n_cells), rng.uniform(0.55, 0.98, n_cells), rng.uniform(0.02, 0.45, n_cells)
    counts = simulate_counts(p, tpr, fpr, n_human=100, n_total=10_000, rng=rng)
    print(f"simulation: {n_cells} cells, B = 100, N = 10,000, p ~ U(0.05, 0.95), tpr ~ U(0.55, 0.98), "
          f"fpr ~ U(0.02, 0.45)")
    df = evaluate(counts, p, sampler, method)
    table = report(df)
    print(table.to_string(float_format=lambda v: f"{v:.4f}"))
    cov = table.loc["bcc", "coverage_90"]
    se = np.sqrt(0.09 / n_cells)
    print(f"BCC 90% coverage {cov:.3f} over {n_cells} cells (binomial sd at 0.90: {se:.3f}); "
          f"target 0.88-0.92: {'met' if 0.88 <= cov <= 0.92 else 'NOT met'}")


def _majority_and_single(checked: pd.DataFrame, prompts: pd.DataFrame, task: int, seed: int) -> pd.DataFrame:
    """Per unit: the oracle (majority of the annotators) and one randomly chosen annotator's answer, as 0/1."""
    from countboard.numeracy.scoring import score_task1, score_task2

    if task == 3:
        keys = ["model", "image_id", "question_id"]
        yes = pd.to_numeric(checked["answer"], errors="coerce")
        df = checked.assign(yes=yes).dropna(subset=["yes"])
        oracle = (df.groupby(keys)["yes"].mean() > 0.5).astype(int).rename("oracle")
        single = df.sample(frac=1.0, random_state=seed).drop_duplicates(keys).set_index(keys)["yes"]
        return pd.concat([oracle, single.astype(int).rename("decision")], axis=1, join="inner").reset_index()
    keys = ["model", "image_id", "prompt_id", "seed"] + (["question"] if task == 1 else [])
    score = score_task1 if task == 1 else score_task2
    oracle = score(checked, prompts).units.set_index(keys)["correct"].astype(int).rename("oracle")
    one = checked.sample(frac=1.0, random_state=seed).drop_duplicates(keys)
    single = score(one, prompts).units.set_index(keys)["correct"].astype(int).rename("decision")
    return pd.concat([oracle, single], axis=1, join="inner").reset_index()


def real_data(root: Path, replicates: int, n_human: int, sampler: SamplerConfig, seed: int, method: str) -> None:
    from countboard.numeracy.release import read_annotations, read_prompts
    from countboard.numeracy.scoring import check_rows

    prompts = read_prompts(root / "prompts.csv")
    counts, truth, meta = [], [], []
    for task in (1, 2, 3):
        checked, _ = check_rows(read_annotations(root / "geckonum_annotations.zip", task=task), prompts)
        units = _majority_and_single(checked, prompts, task, seed)
        for gen, g in units.groupby("model"):
            oracle, decision = g["oracle"].to_numpy(), g["decision"].to_numpy()
            for r in range(replicates):
                rng = np.random.default_rng([seed, r, task, zlib.crc32(str(gen).encode())])
                human = np.full(len(g), np.nan)
                chosen = rng.choice(len(g), size=n_human, replace=False)
                human[chosen] = oracle[chosen]
                counts.append(counts_from_labels(decision, human))
                truth.append(oracle.mean())
                meta.append(dict(generator=gen, task=task, replicate=r, n_units=len(g),
                                 annotator_agreement=np.mean(oracle == decision)))
    print(f"GeckoNum: {len(counts)} cells (7 generators x 3 tasks x {replicates} draws of {n_human} oracle labels); "
          "oracle = majority of 5 annotators, classifier = one random annotator per unit")
    df = pd.concat([pd.DataFrame(meta), evaluate(counts, np.array(truth), sampler, method)], axis=1)
    print(report(df).to_string(float_format=lambda v: f"{v:.4f}"))
    df["bcc_covers"] = (df.bcc_lo <= df.truth) & (df.truth <= df.bcc_hi)
    per_task = df.groupby("task").agg(cells=("truth", "size"), units=("n_units", "mean"),
                                      oracle_rate=("truth", "mean"), agreement=("annotator_agreement", "mean"),
                                      bcc_coverage=("bcc_covers", "mean"),
                                      bcc_mae=("bcc", lambda s: np.mean(np.abs(s - df.loc[s.index, "truth"]))),
                                      cc_mae=("cc", lambda s: np.mean(np.abs(s - df.loc[s.index, "truth"]))),
                                      human_mae=("human", lambda s: np.mean(np.abs(s - df.loc[s.index, "truth"]))))
    print(per_task.to_string(float_format=lambda v: f"{v:.4f}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["sim", "real", "both"], default="both")
    parser.add_argument("--cells", type=int, default=1000, help="simulated cells")
    parser.add_argument("--method", choices=["auto", "exact", "nuts"], default="exact")
    parser.add_argument("--quick", action="store_true", help="300 simulated cells, 2 draws of the real data")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/geckonum")
    parser.add_argument("--replicates", type=int, default=5, help="random draws of the oracle-labelled subset")
    parser.add_argument("--n-human", type=int, default=100)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.cells, args.replicates = min(args.cells, 300), min(args.replicates, 2)
    sampler = SamplerConfig(draws=args.draws, tune=args.draws, chains=2, cores=args.cores, seed=args.seed)
    if args.part in ("sim", "both"):
        simulation(args.cells, sampler, args.seed, args.method)
    if args.part in ("real", "both"):
        if not (args.data / "geckonum_annotations.zip").is_file():
            raise SystemExit(f"GeckoNum annotations not found under {args.data}; pass --data")
        real_data(args.data, args.replicates, args.n_human, sampler, args.seed, args.method)


if __name__ == "__main__":
    main()
