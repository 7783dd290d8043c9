"""Display metadata for every metric and family, read by the engine (validation) and the leaderboard.

Each ``*.yaml`` beside this file holds ``families`` and ``metrics`` of one area; they are merged here. To add a
metric, add an entry under ``metrics`` with ``display``, ``higher_is_better``, ``family`` and ``description``:
the engine refuses to log a metric key that is not declared. A metric with an uncertainty interval names its
bounds under ``interval`` (``low``, ``high``, ``level``); a bootstrap interval over the run's units says
``interval: {bootstrap: <units>, count: <metric holding their number>}`` and gets its bounds ``<key>__low`` and
``<key>__high`` declared here (level 0.9 unless given; see ``countboard.metrics.bootstrap``). A family says where the leaderboard shows it (``page``),
which metrics its table shows first (``columns``), which view columns split its entries into separate rankings
(``levels``, e.g. the GeckoNum task), which figures its page draws (``figures``, see ``docs/leaderboard.md``) and,
on a page of several families, its short name in the page's section control (``section``; default ``display``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

BOUND_SUFFIXES = ("__low", "__high")
BOOTSTRAP_LEVEL = 0.9


@dataclass(frozen=True)
class IntervalInfo:
    """The metric keys holding an interval's bounds, and its level (0.9 for an equal-tailed 90% interval).

    A bootstrap interval also names its ``units`` (what was resampled, e.g. ``images``) and ``count``, the metric
    key holding how many there were; ``units`` is empty for other intervals (e.g. BCC's posterior).
    """

    low: str
    high: str
    level: float
    units: str = ""
    count: str | None = None

    @property
    def method(self) -> str:
        return f"bootstrap over {self.units}" if self.units else "credible interval"


@dataclass(frozen=True)
class MetricInfo:
    key: str
    display: str
    higher_is_better: bool | None
    family: str
    description: str = ""
    fmt: str = ".3f"
    interval: IntervalInfo | None = None
    bound_of: str | None = None  # the metric whose interval bound this is (declared with it)


@dataclass(frozen=True)
class LevelInfo:
    """A view column whose values are never ranked together (one ranking per value), e.g. the task."""

    column: str
    display: str


@dataclass(frozen=True)
class FigureInfo:
    """One figure of a family's page: ``kind`` names the drawing, ``options`` its artifact paths and columns."""

    kind: str
    options: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def get(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)


@dataclass(frozen=True)
class FamilyInfo:
    key: str
    display: str
    main_metric: str
    model_kinds: tuple[str, ...]
    description: str = ""
    page: str = ""
    columns: tuple[str, ...] = ()
    levels: tuple[LevelInfo, ...] = ()
    figures: tuple[FigureInfo, ...] = ()
    section: str = ""  # its name in its page's section control, when ``display`` is too long for it

    @property
    def section_label(self) -> str:
        return self.section or self.display


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

    def page_families(self, page: str) -> list[FamilyInfo]:
        """Families shown on leaderboard page ``page``, in schema order."""
        return [f for f in self.families.values() if f.page == page]


def _interval(key: str, raw: dict | None, where: str) -> IntervalInfo | None:
    if raw is None:
        return None
    try:
        if "bootstrap" in raw:
            low, high = (key + s for s in BOUND_SUFFIXES)
            return IntervalInfo(low=raw.get("low", low), high=raw.get("high", high),
                                level=float(raw.get("level", BOOTSTRAP_LEVEL)), units=str(raw["bootstrap"]),
                                count=raw.get("count"))
        return IntervalInfo(low=raw["low"], high=raw["high"], level=float(raw["level"]))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"metric {key!r} in {where}: `interval` needs low, high (metric keys) and level "
                         "(e.g. 0.9), or bootstrap (the units resampled) and count (the metric of their number)") \
            from None


def _bounds(m: MetricInfo) -> list[MetricInfo]:
    """The bound metrics of a bootstrap interval, declared with the metric they bound."""
    iv = m.interval
    if iv is None or not iv.units:
        return []
    share = (1 - iv.level) / 2
    return [MetricInfo(key=k, display=f"{m.display} {side}", higher_is_better=m.higher_is_better, family=m.family,
                       description=f"{side.capitalize()} end of the {iv.level:.0%} percentile bootstrap interval of "
                                   f"{m.display} ({q:g}% quantile over resamples of the run's {iv.units}).",
                       fmt=m.fmt, bound_of=m.key)
            for k, side, q in ((iv.low, "low", 100 * share), (iv.high, "high", 100 * (1 - share)))]


def _family(key: str, f: dict) -> FamilyInfo:
    figures = []
    for fig in f.get("figures") or ():
        kind, options = (fig, {}) if isinstance(fig, str) else next(iter(fig.items()))
        figures.append(FigureInfo(kind=kind, options=MappingProxyType(dict(options or {}))))
    return FamilyInfo(key=key, display=f["display"], main_metric=f["main_metric"],
                      model_kinds=tuple(f.get("model_kinds", ())), description=f.get("description", ""),
                      page=f.get("page", ""), columns=tuple(f.get("columns") or ()),
                      levels=tuple(LevelInfo(column=c, display=d) for c, d in (f.get("levels") or {}).items()),
                      figures=tuple(figures), section=f.get("section", ""))


def _check(metrics: dict[str, MetricInfo], families: dict[str, FamilyInfo]) -> None:
    """Every key a family or an interval names is a declared metric."""
    for m in metrics.values():
        if m.interval is not None:
            for bound in (m.interval.low, m.interval.high):
                if bound not in metrics:
                    raise ValueError(f"metric {m.key!r}: interval bound {bound!r} is not a declared metric")
            if m.interval.count is not None and m.interval.count not in metrics:
                raise ValueError(f"metric {m.key!r}: interval count {m.interval.count!r} is not a declared metric")
    for f in families.values():
        for key in f.columns:
            if key not in metrics:
                raise ValueError(f"family {f.key!r}: column {key!r} is not a declared metric")


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
            families[key] = _family(key, f)
        for key, m in (doc.get("metrics") or {}).items():
            if key in metrics:
                raise ValueError(f"metric {key!r} declared twice (second time in {entry.name})")
            metrics[key] = MetricInfo(key=key, display=m["display"], higher_is_better=m.get("higher_is_better"),
                                      family=m["family"], description=m.get("description", ""),
                                      fmt=m.get("fmt", ".3f"), interval=_interval(key, m.get("interval"), entry.name))
            for bound in _bounds(metrics[key]):
                if bound.key in metrics:
                    raise ValueError(f"metric {bound.key!r} declared twice (it bounds {key!r} in {entry.name})")
                metrics[bound.key] = bound
    _check(metrics, families)
    return Schema(metrics=metrics, families=families)
