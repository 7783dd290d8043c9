"""A Hydra sweeper over a union of grids: one multirun, cells of different families.

``hydra.sweeper.grids`` is a list of ``{key: "a,b", ...}`` grids; each grid is expanded like the basic sweeper's
``params`` (cartesian product), the union of all grids is launched as one multirun (one parent run), and
command-line overrides apply to every grid (a swept one replaces the grid's values).

Example (``conf/experiment/demo.yaml``)::

    hydra:
      sweeper:
        grids:
          - {model: "oracle,class_blind", dataset: synthetic_shapes, task: "praco_negative,praco_mosaic"}
          - {model: box_oracle, dataset: synthetic_grounding, task: grounding}
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


class GridSweeper(BasicSweeper):
    def __init__(self, grids: list[dict[str, str]] | None = None, max_batch_size: int | None = None,
                 params: dict[str, str] | None = None) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.grids = [dict(g) for g in (grids or [])] or [{}]

    def _jobs(self, arguments: list[str]) -> list[list[str]]:
        from countboard.tracking.callbacks import sweep_jobs

        return sweep_jobs({"grids": self.grids, "params": self.params}, arguments, self.hydra_context.config_loader)

    def sweep(self, arguments: list[str]) -> Any:
        jobs = self._jobs(arguments)
        n = self.max_batch_size or len(jobs)
        self.overrides = [jobs[i:i + n] for i in range(0, len(jobs), n)]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        log.info("%d cells from %d grids", len(jobs), len(self.grids))
        returns, start = [], 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=start)
            start += len(batch)
            returns.append(results)
        failures = [r for batch in returns for r in batch if r.status.name == "FAILED"]
        if failures:  # every cell ran; report the first failure
            _ = failures[0].return_value
        return returns
