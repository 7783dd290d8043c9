"""submitit's SLURM launcher that reports cancelled and lost jobs instead of waiting for them forever."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _SubmititSlurmLauncher
from omegaconf import OmegaConf

from countboard.tracking.slurm import CountboardSlurmConf, collect, missing_slurm_tools, wait_for_jobs

log = logging.getLogger("countboard")

# Base of the slurm_cpu / slurm_gpu presets (conf/hydra/launcher/); Hydra imports this module when it scans plugins.
ConfigStore.instance().store(group="hydra/launcher", name="countboard_slurm", node=CountboardSlurmConf,
                             provider="countboard")


class SlurmLauncher(_SubmititSlurmLauncher):
    """submitit's SLURM launcher that reports cancelled and lost jobs instead of waiting for them forever."""

    def __init__(self, lost_after_s: float = 120, poll_s: float = 5.0, **params: Any) -> None:
        self.lost_after_s = float(lost_after_s)
        self.poll_s = float(poll_s)
        super().__init__(**params)

    def _executor(self):
        """submitit's executor with this launcher's resources (as the submitit launcher builds it)."""
        import submitit

        init = {"folder": self.params["submitit_folder"]}
        if "max_num_timeout" in self.params:
            init["slurm_max_num_timeout"] = self.params["max_num_timeout"]
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"{self._EXECUTOR}_{k}": v for k, v in self.params.items()
                                      if k not in ("submitit_folder", "max_num_timeout")})
        return executor

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and len(job_overrides) > 0
        missing_slurm_tools()
        executor = self._executor()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        log.info("SLURM sweep: %d jobs, output in %s", len(job_overrides), sweep_dir)
        job_params = []
        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            job_params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs = executor.map_array(self, *zip(*job_params, strict=True))
        log.info("submitted SLURM jobs %s", ", ".join(str(j.job_id) for j in jobs))
        lost = wait_for_jobs(jobs, self.lost_after_s, self.poll_s)
        return collect(jobs, lost, job_overrides)
