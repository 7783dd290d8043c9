"""Options of the local one-cell-per-GPU launcher (``hydra/launcher=local_gpu``) and which GPUs it uses.

The launcher itself is ``hydra_plugins.countboard_launcher.gpu_launcher``; its config class lives here, in an
ordinary module, so that job results that carry it can be pickled back from the worker processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from countboard.errors import ConfigError

#: The environment variable that pins a process to its GPUs (read by CUDA itself).
VISIBLE = "CUDA_VISIBLE_DEVICES"


@dataclass
class LocalGpuLauncherConf:
    _target_: str = "hydra_plugins.countboard_launcher.gpu_launcher.LocalGpuLauncher"
    gpus: Any = None  # null: every visible GPU; or a list / comma string of GPU ids, e.g. 0,1 or "2,3"


def parse_gpus(gpus: Any, environ: dict[str, str] | None = None) -> list[str]:
    """The GPU ids to use, one worker each: ``gpus`` as given, else ``CUDA_VISIBLE_DEVICES``, else torch's count.

    Example:
        >>> parse_gpus("0,2"), parse_gpus([1, 3]), parse_gpus(None, {"CUDA_VISIBLE_DEVICES": "4,5"})
        (['0', '2'], ['1', '3'], ['4', '5'])
    """
    environ = os.environ if environ is None else environ
    if gpus is not None and not isinstance(gpus, (str, int)):
        ids = [str(g).strip() for g in gpus]
    elif gpus is not None:
        ids = [g.strip() for g in str(gpus).split(",")]
    elif environ.get(VISIBLE, "").strip():
        ids = [g.strip() for g in environ[VISIBLE].split(",")]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())]
    ids = [g for g in ids if g]
    if not ids:
        raise ConfigError("hydra/launcher=local_gpu found no GPU (CUDA_VISIBLE_DEVICES is unset and torch sees "
                          "none); name them with hydra.launcher.gpus=0,1 or use hydra/launcher=joblib on the CPU")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"hydra.launcher.gpus={','.join(ids)} names a GPU twice; list each GPU once")
    return ids
