"""Structured-config schemas: a typo in a top-level key or a tracking key fails at composition."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hydra.core.config_store import ConfigStore


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


@dataclass
class TrackingConf:
    kind: str = "local"
    store_dir: str | None = "mlruns"
    uri: str | None = None
    artifact_root: str | None = None
    experiment: str = "countboard"
    timeout_s: int = 10


@dataclass
class Config:
    model: Any = None
    dataset: Any = None
    task: Any = None
    tracking: TrackingConf = field(default_factory=TrackingConf)
    device: Device = Device.auto
    seed: int = 0
    batch_size: int = 8
    checkpoint_every: int = 16
    max_samples: int | None = None
    force: bool = False
    progress: bool = True
    data_dir: str = "data"


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="countboard_schema", node=Config)
    cs.store(group="tracking", name="countboard_tracking_schema", node=TrackingConf)
