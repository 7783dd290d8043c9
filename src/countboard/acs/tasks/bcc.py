"""Task ``bcc``: attribute control success of a generator's outputs, judged by a classifier, corrected by BCC.

The model is a classifier (``decide(items) -> 0/1``), the dataset an ACS dataset (``countboard.acs.datasets.simulated``): a
generator's outputs, one group each (a prompt type, an attribute), with human labels where known.

- ``units``: the groups. Each group is a BCC cell.
- ``run_units``: per group, the classifier decides every item. An item is a failed output when its optional
  ``failed`` column is true (an empty, blank or refused generation) or the classifier returns NaN for it (it could
  not judge it): a known failure, counted in ``n_failed`` and as "not satisfied" by every rate
  (``acs_failure_rate``), never dropped. ``n_human`` of the group's other items that have a human label are drawn
  at random (seeded by the job's seed and the group name) as the calibration subset; the record holds the cell's
  counts ``tp, fn, fp, tn`` (decisions against the human labels of that subset), ``s_m``, ``n_m`` (classifier
  positives among, and number of, the group's other judged items) and ``n_failed``. Human labels outside the
  subset are never read.
- ``summarize``: the groups are fitted together (``method``: ``auto``/``exact`` importance sampling, or ``nuts``).
  The pooled cell ``all`` is the population-weighted combination of the groups, ``p_all = sum N_g p_g / N``
  (``quantify.pooling``): the calibration labels are drawn per group, a stratified sample, so the groups' summed
  counts would weigh each group by its labels rather than its items. The run's metrics are those of ``all``;
  ``tables/bcc_cells.parquet`` has one row per cell (metrics, Beta parameters, confusion counts,
  ``no_human_positives``: a cell with no human positive among its labels is fitted with a prior-only TPR, flagged
  there and in the log), ``files/posterior.nc`` the ArviZ InferenceData (NetCDF) of every cell, ``all``
  included. Tags ``generator`` and ``attribute`` name what was judged; the ``model`` tag is the classifier.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from countboard.errors import ConfigError
from countboard.quantify.bcc import METHODS, SamplerConfig
from countboard.quantify.cells import (
    NO_HUMAN_POSITIVES,
    RECORD_COLUMNS,
    CellCounts,
    counts_from_labels,
    report_cells,
)
from countboard.quantify.pooling import pooled_report
from countboard.results import RunContext, Task, TaskResult
from countboard.tracking import tags as tg
from countboard.tracking.tags import RunTags

POOLED = "all"


class BCCTask(Task):
    """Bayesian Classify & Count of one (generator, classifier) pair, per group and pooled.

    Args:
        n_human: Human-labelled items drawn per group (``B`` of each cell).
        draws, tune, chains, cores: Sampler settings (see ``countboard.quantify.SamplerConfig``); the exact method
            returns ``draws * chains`` draws per cell and ignores the rest.
        method: ``auto`` (exact for these binary cells), ``exact`` or ``nuts``.
    """

    name = "bcc"
    family = "acs"
    model_kinds = ("classifier",)
    dataset_kinds = ("judged_outputs",)
    operational_params = {k: "NUTS draws, tuning, chains and cores: the posterior's precision"
                          for k in ("draws", "tune", "chains", "cores")}

    def __init__(self, n_human: int = 100, draws: int = 1000, tune: int = 1000, chains: int = 2, cores: int = 1,
                 method: str = "auto"):
        if n_human < 1:
            raise ConfigError(f"task.n_human must be at least 1, got {n_human}")
        if method not in METHODS:
            raise ConfigError(f"task.method must be one of {', '.join(METHODS)}, got {method!r}")
        self.n_human = int(n_human)
        self.method = method
        self.sampler = dict(draws=int(draws), tune=int(tune), chains=int(chains), cores=int(cores))

    def units(self, model: Any, dataset: Any, ctx: RunContext) -> Sequence[str]:
        groups = dataset.items()["group"].astype(str)
        if POOLED in set(groups):
            raise ConfigError(f"group name {POOLED!r} is reserved for the pooled cell; rename that group")
        return list(dict.fromkeys(groups))

    def human_subset(self, items: pd.DataFrame, group: str, ctx: RunContext,
                     failed: np.ndarray | None = None) -> np.ndarray:
        """Boolean mask of the group's items drawn as the human-labelled calibration subset (among the items
        that did not fail, ``failed``)."""
        ok = np.ones(len(items), dtype=bool) if failed is None else ~np.asarray(failed, dtype=bool)
        if not ok.any():
            raise ConfigError(f"every item of group {group!r} failed (a true `failed` column or no decision from the "
                              "classifier): there is nothing to calibrate; check the generator's outputs")
        has_label = items["human"].notna().to_numpy() & ok
        available = int(has_label.sum())
        if self.n_human > available:
            raise ConfigError(f"group {group!r} has {available} items with a human label (failed outputs aside) but "
                              f"task.n_human is {self.n_human}; lower task.n_human")
        if self.n_human >= int(ok.sum()):
            raise ConfigError(f"group {group!r} has {int(ok.sum())} judged items and task.n_human={self.n_human} "
                              "would label all of them: BCC needs items without a human label; lower task.n_human")
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
            decision = np.asarray(model.decide(items), dtype=np.float64)
            failed = failed_outputs(items, decision)
            subset = self.human_subset(items, group, ctx, failed)
            human = np.where(subset, items["human"].to_numpy(dtype=np.float64), np.nan)
            counts = counts_from_labels(np.where(failed, 0.0, decision), human, failed)
            records.append({"unit_id": group, **asdict(counts)})
        return records

    def summarize(self, records: pd.DataFrame, model: Any, dataset: Any, ctx: RunContext) -> TaskResult:
        rows = records.sort_values("unit_id", key=lambda s: s.astype(str))
        groups = rows["unit_id"].astype(str).tolist()
        rows = rows.assign(n_failed=rows["n_failed"].fillna(0) if "n_failed" in rows else 0)
        counts = [CellCounts(**{c: int(r[c]) for c in RECORD_COLUMNS}) for _, r in rows.iterrows()]
        table, fit = report_cells(counts, groups, SamplerConfig(**self.sampler, seed=ctx.seed),
                                  allow_no_human_positives=True, method=self.method)
        pooled, pooled_draws, posterior = pooled_report(counts, fit, POOLED)
        shares = np.array([[c.judged_share] for c in counts])  # draws of the rate of all outputs, failures in
        table.loc[POOLED] = {**pooled, NO_HUMAN_POSITIVES: False}
        for cell in table.index[table[NO_HUMAN_POSITIVES].astype(bool)]:
            ctx.log.warning("bcc: cell %r has no human positive among its %d labels; its TPR is prior-only "
                            "(no_human_positives in tables/bcc_cells)", cell, int(table.loc[cell, "acs_n_human"]))
        path = ctx.work_dir / "posterior.nc"
        idata = fit.idata.copy()
        idata.posterior = posterior
        idata.to_netcdf(str(path), engine="h5netcdf")
        metrics = {k: float(v) for k, v in table.loc[POOLED].drop(NO_HUMAN_POSITIVES).items() if np.isfinite(v)}
        metrics["bcc_n_cells"] = float(len(groups) + 1)
        cells = table.reset_index()
        cells[NO_HUMAN_POSITIVES] = cells[NO_HUMAN_POSITIVES].astype(bool)
        cells.insert(0, "generator", str(getattr(dataset, "generator", "")))
        return TaskResult(
            metrics=metrics,
            tables={"bcc_cells": cells},
            arrays={"bcc_draws": {"cells": np.array([*groups, POOLED]), "p": np.vstack([fit.draws * shares, pooled_draws])}},
            files={"posterior.nc": path},
            tags=RunTags(generator=str(getattr(dataset, "generator", "")), extra={
                tg.ATTRIBUTE: str(getattr(dataset, "attribute", "")), tg.BCC_METHOD: fit.method}).to_tags(),
        )


def failed_outputs(items: pd.DataFrame, decision: np.ndarray) -> np.ndarray:
    """Items that failed outright: a true ``failed`` column (empty, blank, refused generation) or a NaN decision
    (the classifier could not judge the item)."""
    flagged = items["failed"].fillna(False).astype(bool).to_numpy() if "failed" in items else False
    return np.isnan(decision) | flagged
