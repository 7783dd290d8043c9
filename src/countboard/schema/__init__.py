"""Display metadata for every metric and family, read by the engine (validation) and the leaderboard.

Each ``*.yaml`` beside this file holds ``families`` and ``metrics`` of one area; they are merged here. To add a
metric, add an entry under ``metrics`` with ``display``, ``higher_is_better``, ``family`` and ``description``:
the engine refuses to log a metric key that is not declared.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml


@dataclass(frozen=True)
class MetricInfo:
    key: str
    display: str
    higher_is_better: bool | None
    family: str
    description: str = ""
    fmt: str = ".3f"


@dataclass(frozen=True)
class FamilyInfo:
    key: str
    display: str
    main_metric: str
    model_kinds: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True)
class Schema:
    metrics: dict[str, MetricInfo]
    families: dict[str, FamilyInfo]

    def metric(self, key: str) -> MetricInfo:
        try:
            return self.metrics[key]
        except KeyError:
            raise KeyError(
                f"metric {key!r} is not declared in countboard/schema/*.yaml; declare it there with "
                "display, higher_is_better, family and description"
            ) from None

    def family_metrics(self, family: str) -> list[MetricInfo]:
        return [m for m in self.metrics.values() if m.family == family]


@functools.cache
def load_schema() -> Schema:
    """Merge every schema file of this package (cached)."""
    metrics: dict[str, MetricInfo] = {}
    families: dict[str, FamilyInfo] = {}
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        doc = yaml.safe_load(entry.read_text()) or {}
        for key, f in (doc.get("families") or {}).items():
            if key in families:
                raise ValueError(f"family {key!r} declared twice (second time in {entry.name})")
            families[key] = FamilyInfo(key=key, display=f["display"], main_metric=f["main_metric"],
                                       model_kinds=tuple(f.get("model_kinds", ())),
                                       description=f.get("description", ""))
        for key, m in (doc.get("metrics") or {}).items():
            if key in metrics:
                raise ValueError(f"metric {key!r} declared twice (second time in {entry.name})")
            metrics[key] = MetricInfo(key=key, display=m["display"], higher_is_better=m.get("higher_is_better"),
                                      family=m["family"], description=m.get("description", ""),
                                      fmt=m.get("fmt", ".3f"))
    return Schema(metrics=metrics, families=families)
