"""Task ``bcc``: attribute control success of a generator's outputs, judged by a classifier, corrected by BCC.

The model is a classifier (``decide(items) -> 0/1``), the dataset an ACS dataset (``countboard.acs.datasets.simulated``): a
generator's outputs, one group each (a prompt type, an attribute), with human labels where known.

- ``units``: the groups. Each group is a BCC cell.
- ``run_units``: per group, the classifier decides every item; ``n_human`` items of the group that have a human
  label are drawn at random (seeded by the job's seed and the group name) as the calibration subset; the record
  holds the cell's counts ``tp, fn, fp, tn`` (decisions against the human labels of that subset) and ``s_m``,
  ``n_m`` (classifier positives among, and number of, the group's other items). Human labels outside the subset
  are never read.
- ``summarize``: all groups plus the pooled cell ``all`` (sums of the group counts) are fitted in one batched
  PyMC model. The run's metrics are those of ``all``; ``tables/bcc_cells.parquet`` has one row per cell
  (metrics, Beta parameters, confusion counts, ``no_human_positives``: a cell with no human positive among its
  labels is fitted with a prior-only TPR, flagged there and in the log), ``files/posterior.nc`` the ArviZ InferenceData (NetCDF) of every
  cell. Tags ``generator`` and ``attribute`` name what was judged; the ``model`` tag is the classifier.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from countboard.errors import ConfigError
from countboard.quantify.bcc import SamplerConfig
from countboard.quantify.cells import (
    COUNT_COLUMNS,
    NO_HUMAN_POSITIVES,
    CellCounts,
    counts_from_labels,
    report_cells,
)
from countboard.results import RunContext, Task, TaskResult

POOLED = "all"


class BCCTask(Task):
    """Bayesian Classify & Count of one (generator, classifier) pair, per group and pooled.

    Args:
        n_human: Human-labelled items drawn per group (``B`` of each cell).
        draws, tune, chains, cores: NUTS settings (see ``countboard.quantify.SamplerConfig``).
    """

    name = "bcc"
    family = "acs"

    def __init__(self, n_human: int = 100, draws: int = 1000, tune: int = 1000, chains: int = 2, cores: int = 1):
        if n_human < 1:
            raise ConfigError(f"task.n_human must be at least 1, got {n_human}")
        self.n_human = int(n_human)
        self.sampler = dict(draws=int(draws), tune=int(tune), chains=int(chains), cores=int(cores))

    def units(self, model: Any, dataset: Any, ctx: RunContext) -> Sequence[str]:
        groups = dataset.items()["group"].astype(str)
        if POOLED in set(groups):
            raise ConfigError(f"group name {POOLED!r} is reserved for the pooled cell; rename that group")
        return list(dict.fromkeys(groups))

    def human_subset(self, items: pd.DataFrame, group: str, ctx: RunContext) -> np.ndarray:
        """Boolean mask of the group's items drawn as the human-labelled calibration subset."""
        has_label = items["human"].notna().to_numpy()
        available = int(has_label.sum())
        if self.n_human > available:
            raise ConfigError(f"group {group!r} has {available} items with a human label but task.n_human is "
                              f"{self.n_human}; lower task.n_human")
        if self.n_human >= len(items):
            raise ConfigError(f"group {group!r} has {len(items)} items and task.n_human={self.n_human} would label "
                              "all of them: BCC needs items without a human label; lower task.n_human")
        rng = ctx.rng(zlib.crc32(group.encode()))
        chosen = rng.choice(np.flatnonzero(has_label), size=self.n_human, replace=False)
        mask = np.zeros(len(items), dtype=bool)
        mask[chosen] = True
        return mask

    def run_units(self, model: Any, dataset: Any, unit_ids: Sequence[str], ctx: RunContext) -> list[dict]:
        all_items = dataset.items()
        records = []
        for group in unit_ids:
            items = all_items[all_items["group"].astype(str) == group].reset_index(drop=True)
            decision = np.asarray(model.decide(items))
            subset = self.human_subset(items, group, ctx)
            human = np.where(subset, items["human"].to_numpy(dtype=np.float64), np.nan)
            counts = counts_from_labels(decision, human)
            records.append({"unit_id": group, **asdict(counts)})
        return records

    def summarize(self, records: pd.DataFrame, model: Any, dataset: Any, ctx: RunContext) -> TaskResult:
        rows = records.sort_values("unit_id", key=lambda s: s.astype(str))
        groups = rows["unit_id"].astype(str).tolist()
        counts = [CellCounts(**{c: int(r[c]) for c in COUNT_COLUMNS}) for _, r in rows.iterrows()]
        pooled = CellCounts(**{c: int(rows[c].sum()) for c in COUNT_COLUMNS})
        names = [*groups, POOLED]
        table, fit = report_cells([*counts, pooled], names, SamplerConfig(**self.sampler, seed=ctx.seed),
                                  allow_no_human_positives=True)
        for cell in table.index[table[NO_HUMAN_POSITIVES]]:
            ctx.log.warning("bcc: cell %r has no human positive among its %d labels; its TPR is prior-only "
                            "(no_human_positives in tables/bcc_cells)", cell, int(table.loc[cell, "acs_n_human"]))
        path = ctx.work_dir / "posterior.nc"
        fit.idata.to_netcdf(str(path), engine="h5netcdf")
        metrics = {k: float(v) for k, v in table.loc[POOLED].drop(NO_HUMAN_POSITIVES).items()}
        metrics["bcc_n_cells"] = float(len(names))
        cells = table.reset_index()
        cells.insert(0, "generator", str(getattr(dataset, "generator", "")))
        return TaskResult(
            metrics=metrics,
            tables={"bcc_cells": cells},
            arrays={"bcc_draws": {"cells": np.array(names), "p": fit.draws}},
            files={"posterior.nc": path},
            tags={"generator": str(getattr(dataset, "generator", "")),
                  "attribute": str(getattr(dataset, "attribute", ""))},
        )
