"""Items for attribute control success (ACS): generated outputs, a group each, and a human label where known.

A dataset for the ``bcc`` task has a ``generator`` name, an ``attribute`` name and ``items()``: a DataFrame with
``item_id`` (unique), ``group`` (a BCC cell, e.g. a prompt type) and ``human`` (1 = the attribute is realised,
0 = not, NaN = no human label), plus whatever columns its classifiers read. A classifier (``kind: classifier``)
has ``decide(items) -> (n,)`` 0/1 decisions for the rows of such a DataFrame.

``SimulatedACS`` and ``SimulatedClassifier`` give items with a known success rate per group and a classifier with
known TPR and FPR, for validating the quantification; ``ColumnClassifier`` reads decisions recorded in a column
(e.g. one annotator's answer used as a cheap, noisy classifier).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from countboard.errors import ConfigError
from countboard.quantify.cells import CellCounts


def _stable_uniform(seed: int, keys: Sequence[str]) -> np.ndarray:
    """One uniform number per key, fixed by ``seed`` and the key alone (independent of order and batching)."""
    return np.array([zlib.crc32(f"{seed}:{k}".encode()) / 2**32 for k in keys])


class SimulatedACS:
    """Items with a known success rate per group; the human label of every item is its true label.

    Args:
        n_items: Items per group.
        p: Success rate, one per group (a single number makes one group).
        group_names: Names of the groups (default ``group-00``, ``group-01``, ...).
        generator: Name of the simulated generator (logged as the run's ``generator`` tag).
        attribute: Name of the attribute.
        seed: Seed of the true labels.
    """

    def __init__(self, n_items: int = 10_000, p: float | Sequence[float] = 0.6,
                 group_names: Sequence[str] | None = None, generator: str = "simulated_generator",
                 attribute: str = "simulated_success", seed: int = 0):
        rates = [float(p)] if np.ndim(p) == 0 else [float(x) for x in p]
        if not rates or any(not 0 <= r <= 1 for r in rates):
            raise ConfigError(f"dataset.p must be rates in [0, 1], got {p!r}")
        if n_items < 1:
            raise ConfigError(f"dataset.n_items must be positive, got {n_items}")
        names = list(group_names) if group_names is not None else [f"group-{i:02d}" for i in range(len(rates))]
        if len(names) != len(rates) or len(set(names)) != len(names):
            raise ConfigError(f"dataset.group_names must be {len(rates)} distinct names (one per rate in p)")
        self.generator, self.attribute, self.seed = generator, attribute, seed
        self.rates = dict(zip(names, rates, strict=True))
        self.n_items = int(n_items)
        self._items: pd.DataFrame | None = None

    def items(self) -> pd.DataFrame:
        if self._items is None:
            frames = []
            for g, (name, rate) in enumerate(self.rates.items()):
                rng = np.random.default_rng([self.seed, g])
                frames.append(pd.DataFrame({
                    "item_id": [f"{name}/{i:06d}" for i in range(self.n_items)],
                    "group": name,
                    "human": (rng.random(self.n_items) < rate).astype(np.float64),
                }))
            self._items = pd.concat(frames, ignore_index=True)
        return self._items

    def __len__(self) -> int:
        return self.n_items * len(self.rates)


class SimulatedClassifier:
    """A classifier with known rates: positive with probability ``tpr`` on true successes, ``fpr`` otherwise.

    It reads the true label from the ``human`` column of simulated items (where the human label is the truth);
    each item's decision depends only on ``seed`` and its ``item_id``.
    """

    kind = "classifier"

    def __init__(self, tpr: float = 0.8, fpr: float = 0.15, seed: int = 0, device: str = "cpu"):
        if not (0 <= tpr <= 1 and 0 <= fpr <= 1):
            raise ConfigError(f"model.tpr and model.fpr must lie in [0, 1], got {tpr} and {fpr}")
        self.tpr, self.fpr, self.seed, self.device = float(tpr), float(fpr), int(seed), device

    def decide(self, items: pd.DataFrame) -> np.ndarray:
        truth = items["human"].to_numpy(dtype=np.float64)
        if np.isnan(truth).any():
            raise ConfigError("SimulatedClassifier needs the true label of every item in column `human`; "
                              "use it with SimulatedACS")
        u = _stable_uniform(self.seed, items["item_id"].astype(str))
        return (u < np.where(truth == 1, self.tpr, self.fpr)).astype(np.int64)


class ColumnClassifier:
    """Decisions recorded in a column of the items (1 where ``items[column] == positive``)."""

    kind = "classifier"

    def __init__(self, column: str, positive: float = 1, device: str = "cpu"):
        self.column, self.positive, self.device = column, positive, device

    def decide(self, items: pd.DataFrame) -> np.ndarray:
        if self.column not in items:
            raise ConfigError(f"model.column {self.column!r} is not a column of the items "
                              f"({', '.join(map(str, items.columns))})")
        return (items[self.column] == self.positive).to_numpy().astype(np.int64)


def simulate_counts(p: np.ndarray, tpr: np.ndarray, fpr: np.ndarray, n_human: int, n_total: int,
                    rng: np.random.Generator) -> list[CellCounts]:
    """Counts of cells drawn from the BCC generative story with known rates (one cell per entry of ``p``).

    ``n_human`` items get a human label (the truth) and a decision; the other ``n_total - n_human`` only a
    decision.

    Example:
        >>> c = simulate_counts(np.array([0.5]), np.array([0.9]), np.array([0.1]), 100, 1000,
        ...                     np.random.default_rng(0))[0]
        >>> c.n_human, c.n_total
        (100, 1000)
    """
    if not 0 < n_human < n_total:
        raise ConfigError(f"need 0 < n_human < n_total, got n_human={n_human}, n_total={n_total}")
    p, tpr, fpr = (np.asarray(x, dtype=np.float64) for x in (p, tpr, fpr))
    n_m = n_total - n_human
    pos_h = rng.binomial(n_human, p)
    tp = rng.binomial(pos_h, tpr)
    fp = rng.binomial(n_human - pos_h, fpr)
    pos_m = rng.binomial(n_m, p)
    s_m = rng.binomial(pos_m, tpr) + rng.binomial(n_m - pos_m, fpr)
    return [CellCounts(int(tp[k]), int(pos_h[k] - tp[k]), int(fp[k]), int(n_human - pos_h[k] - fp[k]),
                       int(s_m[k]), n_m) for k in range(len(p))]
