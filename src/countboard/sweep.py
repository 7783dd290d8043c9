"""``countboard-sweep``: the Hydra application. Each job runs one cell (``engine.run_job``).

Examples:
    countboard-sweep model=oracle dataset=synthetic_shapes task=praco_negative
    countboard-sweep -m model=oracle,class_blind task=praco_negative,praco_mosaic hydra/launcher=joblib
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from countboard.config import register_configs
from countboard.paths import conf_dir

register_configs()


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> str | None:
    from countboard.engine import run_job

    return run_job(cfg)


def main() -> None:
    """Console entry point."""
    _app()


if __name__ == "__main__":
    sys.exit(main())
