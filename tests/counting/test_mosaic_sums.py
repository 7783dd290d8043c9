"""The mosaic test reads sums of each map where the counter makes it: the same records as from the maps on the
host, for every kind of counter, with the maps coming to the host only for figures and ``keep_maps``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from countboard.counting.datasets.mosaic import split_counts
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.models.class_blind import ClassBlindCounter
from countboard.counting.models.clipseg import ClipSegCounter, region_density, regions_to_density_batch
from countboard.counting.models.oracle import OracleCounter
from countboard.counting.models.owlv2 import Owlv2Counter
from countboard.counting.models.shapecount import (
    ShapeCountArch,
    ShapeCountCounter,
    ShapeCountNet,
    grid_density,
    grid_to_density,
    save_checkpoint,
)
from countboard.counting.tasks.mosaic_sums import MapSums, host_sums, tensor_sums
from countboard.counting.tasks.praco import PracoMosaic
from countboard.metrics.counting import pool_grid
from countboard.metrics.grounding import mosaic_grounding
from countboard.metrics.praco_official import OFFICIAL_GRIDS, official_cell_rows, official_mosaic_cells
from countboard.results import RunContext

SHAPES = dict(image_size=(48, 48), size_range=(5.0, 8.0), count_range=(1, 9),
              images_per_class={"train": 0, "val": 0, "test": 2}, multi_class_images=0, n_classes=3)
#: Mosaic layouts: a 44-row tile puts the seam inside shapecount's 8-pixel cells and between the pixels CLIPSeg's
#: logits are resized from.
LAYOUTS = [dict(orientation="vertical", tile_size=[44, 52]), dict(orientation="horizontal", tile_size=[44, 52])]


def _maps(rng, shape, kind):
    if kind == "points":  # unit masses, as the oracle's and the detectors' maps
        return rng.poisson(0.05, size=shape).astype(np.float32)
    return (rng.normal(size=shape) * rng.uniform(0, 1, size=shape) ** 4).astype(np.float32)


@pytest.mark.parametrize(("shape", "seam", "orientation"), [((10, 7), 5, "vertical"), ((9, 14), 7, "horizontal"),
                                                            ((17, 5), 8, "vertical"), ((3, 20), 10, "horizontal")])
def test_host_sums_are_what_the_metric_functions_compute(shape, seam, orientation):
    rng = np.random.default_rng(sum(shape))
    axis = 0 if orientation == "vertical" else 1
    for kind in ("points", "signed"):
        dmap = _maps(rng, shape, kind)
        sums = host_sums(dmap, seam, orientation, 8)
        assert sums.halves == split_counts(dmap, seam, orientation)
        np.testing.assert_array_equal(sums.cells, pool_grid(dmap, 8))
        assert sums.grounding(seam, orientation) == mosaic_grounding(dmap, seam, orientation)
        gt = np.zeros(shape, np.float32)
        gt.flat[rng.choice(gt.size, 4)] = 1.0
        gt_pos = np.split(gt, [seam], axis=axis)[0]
        truth = np.clip(gt_pos.astype(np.float64), 0, None)
        rows = official_cell_rows(sums.official, np.concatenate([truth, np.zeros_like(truth)], axis=axis))
        direct = official_mosaic_cells(*np.split(dmap, [seam], axis=axis), gt_pos, orientation)
        for n in OFFICIAL_GRIDS:
            np.testing.assert_array_equal(rows[n], direct[n])
    assert host_sums(np.zeros(shape), seam, orientation, 8).grounding(seam, orientation) == \
        mosaic_grounding(np.zeros(shape), seam, orientation)


def test_a_non_finite_map_fails_with_the_metrics_message():
    dmap = np.ones((6, 4))
    dmap[1, 1] = np.nan
    with pytest.raises(ValueError) as direct:
        mosaic_grounding(dmap, 3, "vertical")
    with pytest.raises(ValueError) as from_sums:
        host_sums(dmap, 3, "vertical", 8).grounding(3, "vertical")
    assert str(from_sums.value) == str(direct.value)
    assert not MapSums.from_arrays((6, 4), [t.numpy() for t in tensor_sums(torch.from_numpy(dmap), 3,
                                                                                 "vertical", 8)]).finite


@pytest.mark.parametrize(("shape", "seam", "orientation"), [((10, 7), 5, "vertical"), ((9, 14), 7, "horizontal"),
                                                            ((40, 33), 20, "vertical")])
def test_tensor_sums_equal_host_sums(shape, seam, orientation):
    """The accelerator's arithmetic, run on the CPU: exact on unit masses, float64 rounding otherwise."""
    rng = np.random.default_rng(7)
    for kind in ("points", "signed"):
        dmap = _maps(rng, shape, kind)
        host = host_sums(dmap, seam, orientation, 8)
        dev = MapSums.from_arrays(shape, [t.numpy() for t in tensor_sums(torch.from_numpy(dmap), seam,
                                                                         orientation, 8)])
        close = (lambda a, b: np.testing.assert_array_equal(a, b)) if kind == "points" else \
            (lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12))
        close(dev.halves, host.halves)
        close(dev.cells, host.cells)
        for n in OFFICIAL_GRIDS:
            close(dev.official[n], host.official[n])
        close([dev.mass, dev.inside, dev.penalty], [host.mass, host.inside, host.penalty])
        assert dev.finite and dev.size == host.size


def test_device_builds_of_shapecount_and_clipseg_maps_equal_the_host_maps():
    rng = np.random.default_rng(3)
    for size in ((44, 52), (48, 48), (13, 21)):
        grid = rng.uniform(0, 0.3, size=(-(-size[0] // 8), -(-size[1] // 8))).astype(np.float32)
        np.testing.assert_allclose(grid_density(torch.from_numpy(grid), size, 8).numpy(),
                                   grid_to_density(grid, size, 8), rtol=1e-6, atol=1e-9)
    probs = torch.from_numpy(rng.uniform(0, 1, size=(3, 30, 26)).astype(np.float32)) ** 3
    for threshold, min_region in ((0.5, 1), (0.3, 4)):
        (dens,) = region_density([(probs, min_region)], threshold, steps=2)  # more rounds than 2: read again
        np.testing.assert_allclose(dens.numpy(), regions_to_density_batch(probs.numpy(), threshold, min_region),
                                   rtol=1e-6, atol=1e-9)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return SyntheticShapes(tmp_path_factory.mktemp("mosaic_sums") / "shapes", **SHAPES)


@pytest.fixture(scope="module")
def counters(shapes, tiny_clipseg_dir, tiny_owlv2_dir, tmp_path_factory):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    table = {c: rng.normal(size=384).astype(np.float32) for c in shapes.classes}
    checkpoint = save_checkpoint(tmp_path_factory.mktemp("shapecount") / "shapecount.pt",
                                 ShapeCountNet(ShapeCountArch()).eval(), "aware", table, {})
    return {"oracle": OracleCounter(), "class_blind": ClassBlindCounter(),
            "shapecount": ShapeCountCounter(checkpoint=str(checkpoint)),
            "clipseg": ClipSegCounter(str(tiny_clipseg_dir), mask_threshold=0.5, min_region_frac=0.002),
            "owlv2": Owlv2Counter(model_id=str(tiny_owlv2_dir), score_threshold=0.5)}


class MapsSeen:
    """Wraps a counter's ``reduce_maps`` and counts the maps the task asks back in full."""

    def __init__(self, counter):
        self.counter, self.full = counter, 0

    def __getattr__(self, name):
        return getattr(self.counter, name)

    def reduce_maps(self, items, prompts, reduce):
        def spy(i, dmap):
            out = reduce(i, dmap)
            self.full += sum(tuple(t.shape) == tuple(dmap.shape) for t in out)
            return out

        return self.counter.reduce_maps(items, prompts, spy)


@pytest.mark.parametrize(("name", "layout"), [(n, LAYOUTS[0]) for n in ("oracle", "class_blind", "shapecount",
                                                                          "clipseg", "owlv2")]
                         + [(n, LAYOUTS[1]) for n in ("oracle", "shapecount")])
def test_records_from_device_sums_equal_records_from_host_maps(name, layout, counters, shapes, tmp_path):
    """Every record (both halves, every metric) is the one the maps on the host give (``keep_maps=True``
    brings every map to the host), and only the figure's map comes to the host otherwise."""
    ctx = RunContext(device="cpu", seed=0, batch_size=5, work_dir=tmp_path, progress=False)
    task, on_host = PracoMosaic(n_figures=1, **layout), PracoMosaic(n_figures=1, keep_maps=True, **layout)
    units = task.units(None, shapes, ctx)
    seen = MapsSeen(counters[name])
    records = task.run_units(seen, shapes, units, ctx)
    assert seen.full == 1 and sum("figure_png" in r for r in records) == 1
    reference = on_host.run_units(counters[name], shapes, units, ctx)
    assert not any("error" in r for r in records)
    assert records == [{k: v for k, v in r.items() if k != "maps_npz"} for r in reference]


def test_detector_reads_a_batch_in_one_transfer(counters, shapes, monkeypatch, tmp_path):
    from countboard.counting.models import detect_count

    calls = []
    real = detect_count.to_host
    monkeypatch.setattr(detect_count, "to_host", lambda tensors: calls.append(len(tensors)) or real(tensors))
    ctx = RunContext(device="cpu", seed=0, batch_size=4, work_dir=tmp_path, progress=False)
    task = PracoMosaic(n_figures=0, **LAYOUTS[0])
    units = task.units(None, shapes, ctx)[:8]
    task._count_singles = lambda *a: None  # only the mosaics' reads are counted here
    task.run_units(counters["owlv2"], shapes, units, ctx)
    assert len(calls) == 2  # two batches of 4 mosaics, one read each


class OnDevice:
    """A counter whose maps are made and reduced as on an accelerator, here on the CPU."""

    def __init__(self, counter):
        self.counter = counter

    def __getattr__(self, name):
        return getattr(self.counter, name)

    def reduce_maps(self, items, prompts, reduce):
        from countboard.models.base import read_reductions

        if not hasattr(self.counter, "device_maps"):  # the detectors make their maps on the device everywhere
            return self.counter.reduce_maps(items, prompts, reduce)
        return read_reductions(self.counter.device_maps(self.counter.encode_images(items), prompts), reduce)


@pytest.mark.parametrize("name", ["oracle", "shapecount", "clipseg", "owlv2"])
def test_the_accelerator_path_gives_the_same_records(name, counters, shapes, tmp_path, monkeypatch):
    """Maps made with tensor ops and reduced with ``tensor_sums``: the counts and metrics of the host's maps, up
    to float rounding (exactly on unit masses)."""
    from countboard.counting.tasks import praco

    monkeypatch.setattr(praco, "device_sums", tensor_sums)
    ctx = RunContext(device="cpu", seed=0, batch_size=5, work_dir=tmp_path, progress=False)
    task = PracoMosaic(n_figures=0, **LAYOUTS[0])
    units = task.units(None, shapes, ctx)
    device = task.run_units(OnDevice(counters[name]), shapes, units, ctx)
    host = PracoMosaic(n_figures=0, keep_maps=True, **LAYOUTS[0]).run_units(counters[name], shapes, units, ctx)
    assert not any("error" in r for r in device)
    for d, h in zip(device, host, strict=True):
        assert d.keys() == h.keys() - {"maps_npz"}
        for key, value in d.items():
            if isinstance(value, str):
                assert value == h[key]
            elif name in ("oracle", "owlv2"):
                assert value == h[key], key
            else:
                np.testing.assert_allclose(value, h[key], rtol=1e-5, atol=1e-9, err_msg=key)


def test_device_density_uses_device_maps_off_the_cpu_only():
    """``Counter.device_density``: a counter with ``device_maps`` makes its maps there on an accelerator (its
    encoded features, nothing on the host); on the CPU, and without ``device_maps``, ``density``'s own maps."""
    from countboard.items import ImageItem

    class Made(OracleCounter):
        def device_maps(self, features, prompts):  # the oracle's features are its items
            return [torch.full(f.size, float(len(p))) for f, p in zip(features, prompts, strict=True)]

    item = ImageItem("a", np.zeros((2, 2, 3), np.uint8), {"x": np.array([[0.5, 0.5]])}, class_name="x")
    off_cpu = Made()
    off_cpu.device = "cuda"  # dispatch only: nothing here touches a GPU
    assert off_cpu.device_density([item], ["abc"])[0].tolist() == [[3.0, 3.0], [3.0, 3.0]]
    on_cpu = Made()
    assert float(on_cpu.device_density([item], ["x"])[0].sum()) == 1.0  # density's own map: the oracle's point
    plain = OracleCounter()
    plain.device = "cuda"
    assert float(plain.device_density([item], ["x"])[0].sum()) == 1.0
