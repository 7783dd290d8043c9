"""What the mosaic test reads of a predicted density map: sums over parts of it, computed where the map is.

A mosaic's record needs, of its map: the counts of both halves (``Mosaic.split``), the ``grid x grid`` cell sums
(``pool_grid``), the released scorer's cell sums of the map clipped at 0 on each grid of ``OFFICIAL_GRIDS``
(``official_mosaic_cells``), and the mass of the clipped map in all, inside the positive half, and weighted by the
distance to that half (``mosaic_grounding``'s ``mosaic_io_ratio`` and ``mosaic_wdp``). ``host_sums`` computes them
from a map on the host with the arithmetic of those functions, so the records are the ones the map gives them;
``device_sums`` computes them from a tensor where it is (``Counter.reduce_maps``), so that the maps of a batch never
leave the device: with tensor ops on an accelerator (the same sums up to float64 rounding), with ``host_sums`` on
the CPU (the host is the device there, and the records are the same bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from countboard.counting.datasets.mosaic import split_counts
from countboard.metrics.counting import pool_edges, pool_grid
from countboard.metrics.grounding import EPS, distance_map
from countboard.metrics.praco_official import OFFICIAL_GRIDS, official_cell_edges, official_cell_sums


@dataclass
class MapSums:
    """The sums of one mosaic's map that its record is made of.

    Attributes:
        size: ``(H, W)`` of the map.
        halves: Counts of the positive and the negative half.
        cells: ``(grid, grid)`` sums of the map (``pool_grid``).
        official: Per grid side ``n`` of ``OFFICIAL_GRIDS``, the ``(n, n)`` sums of the clipped map over the
            released scorer's cells.
        mass: Sum of the clipped map.
        inside: Sum of the clipped map over the positive half.
        penalty: Sum of the clipped map weighted by the distance to the positive half.
        finite: Whether the clipped map is finite.
    """

    size: tuple[int, int]
    halves: tuple[float, float]
    cells: np.ndarray
    official: dict[int, np.ndarray]
    mass: float
    inside: float
    penalty: float
    finite: bool

    def grounding(self, seam: int, orientation: str) -> dict[str, float]:
        """``mosaic_grounding`` of the map (the positive half first) from these sums, with its checks."""
        h, w = self.size
        extent = w if orientation == "horizontal" else h
        if not 0 < seam < extent:
            raise ValueError(f"seam {seam} must lie strictly inside the map ({orientation} extent {extent})")
        if not self.finite:
            raise ValueError(f"activation map (shape {self.size}) must be 2-D, finite and non-negative "
                             "when normalize=False")
        if self.mass <= 0:
            return {"mosaic_io_ratio": 0.0, "mosaic_wdp": 0.0}
        return {"mosaic_io_ratio": float(self.inside / self.mass),
                "mosaic_wdp": float(self.penalty / (self.penalty + self.mass + EPS))}

    def tensors(self) -> list:
        """The sums as CPU tensors, in the order ``from_arrays`` reads them."""
        import torch

        return [torch.tensor(self.halves, dtype=torch.float64), torch.from_numpy(np.asarray(self.cells)),
                *(torch.from_numpy(self.official[n]) for n in OFFICIAL_GRIDS),
                torch.tensor([self.mass, self.inside, self.penalty], dtype=torch.float64),
                torch.tensor(self.finite)]

    @classmethod
    def from_arrays(cls, size: tuple[int, int], arrays: list[np.ndarray]) -> MapSums:
        """The sums from what ``device_sums`` returned, read on the host."""
        halves, cells, *rest = arrays
        official = dict(zip(OFFICIAL_GRIDS, rest[:len(OFFICIAL_GRIDS)], strict=True))
        mass, inside, penalty = (float(v) for v in rest[len(OFFICIAL_GRIDS)])
        return cls(tuple(size), (float(halves[0]), float(halves[1])), np.asarray(cells, np.float64),
                   {n: np.asarray(v, np.float64) for n, v in official.items()}, mass, inside, penalty,
                   bool(rest[-1]))


def _positive_box(seam: int, orientation: str, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The positive half as ``mosaic_grounding``'s box ``(y0, x0, y1, x1)`` (for a seam inside the map)."""
    h, w = size
    return (0, 0, int(seam), w) if orientation == "vertical" else (0, 0, h, int(seam))


def host_sums(density: np.ndarray, seam: int, orientation: str, grid: int) -> MapSums:
    """The sums of a map on the host, each computed as the record's metric functions compute it."""
    d = np.asarray(density, dtype=np.float64)
    a = np.clip(d, 0, None)
    finite = bool(np.isfinite(a).all())
    y0, x0, y1, x1 = box = _positive_box(seam, orientation, d.shape)
    penalty = float((a * np.maximum(distance_map(box, a.shape), 0)).sum()) if finite else float("nan")
    return MapSums(tuple(d.shape), split_counts(density, seam, orientation), pool_grid(density, grid),
                   {n: official_cell_sums(a, n) for n in OFFICIAL_GRIDS}, float(a.sum()),
                   float(a[y0:y1, x0:x1].sum()), penalty, finite)


def device_sums(density, seam: int, orientation: str, grid: int) -> list:
    """The sums of a map tensor as tensors on its device (``MapSums.from_arrays`` reads them back).

    On the CPU they are ``host_sums`` of the same values; elsewhere tensor ops compute them on the device
    (``tensor_sums``).
    """
    if density.device.type == "cpu":
        return host_sums(density.numpy(), seam, orientation, grid).tensors()
    return tensor_sums(density, seam, orientation, grid)


def tensor_sums(density, seam: int, orientation: str, grid: int) -> list:
    """``host_sums`` with tensor ops on the map's device; nothing here waits for the device.

    Cells are summed row by row and column by column into their cells (``index_add_``, deterministic under the
    job's CUDA numerics), so a cell holds only its own pixels, as ``pool_grid``'s ``reduceat`` does.
    """
    import torch

    d = density.to(torch.float64)
    h, w = d.shape
    axis = 0 if orientation == "vertical" else 1
    extent = d.shape[axis]
    halves = torch.stack([d.narrow(axis, 0, seam).sum(), d.narrow(axis, seam, extent - seam).sum()])
    a = d.clamp(min=0)
    y0, x0, y1, x1 = _positive_box(seam, orientation, (h, w))
    rows = torch.arange(h, device=d.device, dtype=torch.float64)[:, None]
    cols = torch.arange(w, device=d.device, dtype=torch.float64)[None, :]
    dist = torch.maximum(torch.maximum(y0 - rows, rows - y1), torch.maximum(x0 - cols, cols - x1)).clamp(min=0)
    scalars = torch.stack([a.sum(), a[y0:y1, x0:x1].sum(), (a * dist).sum()])
    cells = _cell_sums(d, tuple(pool_edges(h, grid).tolist()), tuple(pool_edges(w, grid).tolist()))
    official = [_cell_sums(a, tuple(official_cell_edges(h, n).tolist()), tuple(official_cell_edges(w, n).tolist()))
                for n in OFFICIAL_GRIDS]
    return [halves, cells, *official, scalars, torch.isfinite(a).all()]


@lru_cache(maxsize=256)
def _cell_of(edges: tuple[int, ...], length: int) -> np.ndarray:
    """The cell of each of ``length`` pixels between ``edges`` (empty cells get none)."""
    return np.searchsorted(np.asarray(edges[1:]), np.arange(length), side="right")


@lru_cache(maxsize=256)
def _cell_index(edges: tuple[int, ...], length: int, device: str):
    """:func:`_cell_of` as a tensor on ``device``, copied once per shape (``transfer.to_device``: without waiting)."""
    from countboard.models.transfer import to_device

    return to_device(_cell_of(edges, length), device)


def _cell_sums(x, ys: tuple[int, ...], xs: tuple[int, ...]):
    import torch

    rows_of = _cell_index(ys, x.shape[0], str(x.device))
    cols_of = _cell_index(xs, x.shape[1], str(x.device))
    by_row = torch.zeros((len(ys) - 1, x.shape[1]), dtype=x.dtype, device=x.device).index_add_(0, rows_of, x)
    return torch.zeros((len(ys) - 1, len(xs) - 1), dtype=x.dtype, device=x.device).index_add_(1, cols_of, by_row)
