"""``countboard-sweep``: the Hydra application. Each job runs one cell (``engine.run_job``).

Examples:
    countboard-sweep model=oracle dataset=synthetic_shapes task=praco_negative
    countboard-sweep -m model=oracle,class_blind task=praco_negative,praco_mosaic hydra/launcher=joblib
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import fields

import hydra
from hydra.errors import CompactHydraException
from omegaconf import DictConfig

from countboard.config import Config, TrackingConf, register_configs
from countboard.errors import debug_enabled, user_message
from countboard.paths import conf_dir

register_configs()


class CellError(CompactHydraException):
    """A cell's error the user can fix: Hydra prints its one line, without a traceback."""


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> str | None:
    from countboard.engine import run_job

    try:
        return run_job(cfg)
    except Exception as exc:
        message = user_message(exc)
        if message is None or debug_enabled():
            raise
        raise CellError(f"error: {message}") from None


_VALUE_FLAGS = ("--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp", "--experimental-rerun")


def unknown_key(argv: list[str]) -> str | None:
    """A message when a command-line override names a top-level or tracking key that does not exist.

    Hydra refuses such keys too, but without saying which ones exist; model/dataset/task keys are checked against
    their class when the job starts (``config.check_node``).
    """
    top = {f.name for f in fields(Config)}
    groups = {p.name for p in conf_dir().iterdir() if p.is_dir()} | {"hydra"}
    tracking = {f.name for f in fields(TrackingConf)}
    skip_next = False
    for arg in argv:
        if skip_next or arg.startswith("-"):
            skip_next = arg in _VALUE_FLAGS
            continue
        key = arg.split("=", 1)[0]
        if "=" not in arg or key.startswith(("+", "~", "hydra")) or "/" in key:
            continue
        head, _, rest = key.partition(".")
        if head not in top and head not in groups:
            return (f"unknown config key `{head}` in `{arg}`. Top-level keys: {', '.join(sorted(top))}; config "
                    f"groups: {', '.join(sorted(groups - {'hydra'}))} (e.g. model=<option>, model.<param>=…)")
        if head == "tracking" and rest and rest.split(".")[0] not in tracking:
            return (f"unknown tracking key `{rest}` in `{arg}`; tracking keys: {', '.join(sorted(tracking))}")
    return None


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    """Console entry point. SIGTERM stops like Ctrl-C: the runs this process owns end KILLED, the parent closes."""
    message = unknown_key(sys.argv[1:])
    if message:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    if debug_enabled():
        os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    signal.signal(signal.SIGTERM, _terminate)
    from countboard.tracking.callbacks import fail_open_sweep

    try:
        _app()
    except KeyboardInterrupt:  # the parent closes from its children at exit (left RUNNING if another owns some)
        print("stopped: runs in progress were marked KILLED; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    except SystemExit as stop:
        if stop.code not in (0, None):
            fail_open_sweep(stop.__context__)  # Hydra reports the error, then exits from its handler
        raise
    except BaseException as exc:  # HYDRA_FULL_ERROR=1: the error is raised, not reported
        fail_open_sweep(exc)
        raise


if __name__ == "__main__":
    sys.exit(main())
