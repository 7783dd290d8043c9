"""One cell per GPU on this machine: ``countboard-sweep -m hydra/launcher=local_gpu device=cuda …``.

The launcher starts one worker process per GPU (``hydra.launcher.gpus=0,1,…``; default: every GPU in
``CUDA_VISIBLE_DEVICES``, else every GPU torch sees). Each worker is a fresh (spawned) process that sets
``CUDA_VISIBLE_DEVICES`` to its one GPU before anything touches CUDA, and then runs cells one after another, so a
cell sees exactly one device (``cuda`` = ``cuda:0`` inside it) and no two cells share a GPU. Cells run through
Hydra's ``run_job`` and ``countboard.engine.run_job`` like under every other launcher: the same leases, resume and
parent run (the sweep callback's parent run id reaches the workers through the environment).
"""

import concurrent.futures as cf
import logging
import multiprocessing
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from countboard.tracking.local_gpu import VISIBLE, LocalGpuLauncherConf, parse_gpus

log = logging.getLogger("countboard")

# Base of the local_gpu preset (conf/hydra/launcher/); Hydra imports this module when it scans plugins.
ConfigStore.instance().store(group="hydra/launcher", name="countboard_local_gpu", node=LocalGpuLauncherConf,
                             provider="countboard")


def _pin(gpu_ids: Any) -> None:
    """Worker initializer: end with the sweep however it ends (``processes.die_with_parent``), then take one GPU
    id and make it the only one this process sees."""
    from countboard.processes import die_with_parent

    die_with_parent()
    os.environ[VISIBLE] = gpu_ids.get()


def _execute(payload: bytes) -> bytes:
    """Run one job in a worker (as Hydra's joblib launcher does): its sweep config, then ``run_job``.

    Payload and result travel through cloudpickle: Hydra loads its plugins' config classes outside the import
    system, so plain pickle cannot name them.
    """
    import cloudpickle
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import run_job
    from omegaconf import open_dict

    idx, overrides, hydra_context, config, task_function, state = cloudpickle.loads(payload)
    setup_globals()
    Singleton.set_state(state)
    sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
    HydraConfig.instance().set_config(sweep_config)
    return cloudpickle.dumps(run_job(hydra_context=hydra_context, config=sweep_config, task_function=task_function,
                                     job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir"))


class LocalGpuLauncher(Launcher):
    """Runs the cells of a multirun in parallel, one per GPU, each process pinned to its GPU."""

    def __init__(self, gpus: Any = None) -> None:
        self.gpus = gpus
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import cloudpickle

        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        gpus = parse_gpus(self.gpus)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info("local GPU sweep: %d jobs on GPUs %s, one cell per GPU at a time", len(job_overrides),
                 ",".join(gpus))
        ctx = multiprocessing.get_context("spawn")  # fresh workers: no CUDA state inherited from this process
        queue = ctx.Queue()
        for gpu in gpus:
            queue.put(gpu)
        state = Singleton.get_state()
        payloads = []
        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            payloads.append(cloudpickle.dumps((idx, list(overrides), self.hydra_context, self.config,
                                               self.task_function, state)))
        with cf.ProcessPoolExecutor(max_workers=min(len(gpus), len(payloads)), mp_context=ctx,
                                    initializer=_pin, initargs=(queue,)) as pool:
            futures = [pool.submit(_execute, p) for p in payloads]
            return [_result(f, overrides) for f, overrides in zip(futures, job_overrides, strict=True)]


def _result(future: cf.Future, overrides: Sequence[str]) -> JobReturn:
    """The job's return; a worker that died (killed, out of memory) is a failed job, not a hung sweep."""
    import cloudpickle

    try:
        return cloudpickle.loads(future.result())
    except cf.process.BrokenProcessPool as exc:
        ret = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
        ret._return_value = RuntimeError(f"the worker running {' '.join(overrides)} died ({exc}); rerun the sweep "
                                         "to resume its cell")
        return ret
