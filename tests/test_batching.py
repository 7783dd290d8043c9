"""Batch sizes by memory and model calls that outlive running out of it (CUDA's paths with a fake device)."""

from __future__ import annotations

import pytest
import torch

from countboard.batching import CPU_CAP, GPU_CAP, GPU_MEMORY_SHARE, PROBE_ITEMS, Batching, cpu_auto_size


def _outputs(batching: Batching, items, fn):
    return [(list(b), out if isinstance(out, Exception) else list(out)) for b, out in batching.batches(items, fn)]


def test_fixed_size_batches_and_errors_in_place_of_outputs():
    def fn(batch):
        if 4 in batch:
            raise ValueError("bad item 4")
        return [x * 10 for x in batch]

    got = _outputs(Batching(3, "cpu"), range(8), fn)
    assert [b for b, _ in got] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert got[0][1] == [0, 10, 20] and isinstance(got[1][1], ValueError) and got[2][1] == [60, 70]


@pytest.mark.parametrize("oom", [torch.cuda.OutOfMemoryError, MemoryError])
def test_out_of_memory_halves_the_batch_and_keeps_what_finished(oom):
    calls = []

    def fn(batch):
        calls.append(list(batch))
        if len(batch) > 3:
            raise oom("CUDA out of memory. Tried to allocate 2.00 GiB")
        return [x * 10 for x in batch]

    batching = Batching(8, "cuda", gpu=FakeGpu(peak=0, free=0))
    got = _outputs(batching, range(11), fn)
    assert [x for _, out in got for x in out] == [x * 10 for x in range(11)]
    assert batching.size == 2 and [len(c) for c in calls] == [8, 4, 2, 2, 2, 2, 2, 1]
    done = [x for c in calls if len(c) <= 3 for x in c]
    assert sorted(done) == list(range(11))  # every item computed once


def test_out_of_memory_with_one_item_fails_that_item_only():
    def fn(batch):
        if 2 in batch:
            raise torch.cuda.OutOfMemoryError("out of memory")
        return batch

    got = _outputs(Batching(2, "cpu"), range(4), fn)
    assert [b for b, _ in got] == [[0, 1], [2], [3]]
    assert isinstance(got[1][1], torch.cuda.OutOfMemoryError) and got[2][1] == [3]


class FakeGpu:
    """A device whose probe peaks ``peak`` bytes above its start and leaves ``free`` bytes free."""

    def __init__(self, peak: int, free: int):
        self.peak, self.free_bytes, self.events = peak, free, []

    def start(self):
        self.events.append("start")

    def peak_above_start(self):
        return self.peak

    def free(self):
        return self.free_bytes

    def release(self):
        self.events.append("release")


def test_auto_on_cuda_measures_a_probe_then_fills_the_free_memory():
    gpu = FakeGpu(peak=PROBE_ITEMS * 100 * 2**20, free=10 * 2**30)
    batching = Batching("auto", "cuda:1", gpu=gpu)
    assert batching.size == PROBE_ITEMS
    got = _outputs(batching, range(200), lambda b: b)
    expected = int(10 * 2**30 * GPU_MEMORY_SHARE // (100 * 2**20))  # 71 items of 100 MiB
    assert [len(b) for b, _ in got][:3] == [PROBE_ITEMS, expected, expected]
    assert [x for _, out in got for x in out] == list(range(200)) and gpu.events == ["start"]
    roomy = Batching("auto", "cuda", gpu=FakeGpu(peak=2, free=2**40))
    list(roomy.batches(range(3), lambda b: b))
    assert roomy.size == GPU_CAP


def test_auto_on_cuda_shrinks_when_the_measured_size_runs_out_of_memory():
    gpu = FakeGpu(peak=PROBE_ITEMS * 4 * 2**20, free=2**30)

    def fn(batch):
        if len(batch) > 100:
            raise torch.cuda.OutOfMemoryError("out of memory")
        return batch

    batching = Batching("auto", "cuda", gpu=gpu)
    got = _outputs(batching, range(1000), fn)
    assert [x for _, out in got for x in out] == list(range(1000))
    measured = int(2**30 * GPU_MEMORY_SHARE // (4 * 2**20))  # 179 items of 4 MiB
    assert batching.size == measured // 2 == 89  # 179 ran out of memory
    assert gpu.events.count("release") == 1


def test_auto_on_the_cpu_is_half_the_available_memory_capped():
    assert cpu_auto_size(8 * 2**30) == 8 and cpu_auto_size(0) == 1 and cpu_auto_size(2**50) == CPU_CAP
    assert 1 <= Batching("auto", "cpu").size <= CPU_CAP
    with pytest.raises(ValueError, match="positive number or auto"):
        Batching(0, "cpu")


def test_isolated_runs_a_failed_batch_item_by_item(tmp_path):
    """``RunContext.isolated``: the failure stays with its item, a single-item batch is not called twice, and an
    exception of a ``reraise`` type stops the loop."""
    from countboard.results import RunContext

    calls = []

    def fn(batch):
        calls.append(list(batch))
        if 4 in batch:
            raise ValueError("bad item 4")
        return [x * 10 for x in batch]

    ctx = RunContext(device="cpu", seed=0, batch_size=3, work_dir=tmp_path, progress=False)
    got = [(list(b), out) for b, out in ctx.isolated(range(8), fn)]
    assert [b for b, _ in got] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert got[1][1][0] == 30 and isinstance(got[1][1][1], ValueError) and got[1][1][2] == 50
    assert calls == [[0, 1, 2], [3, 4, 5], [3], [4], [5], [6, 7]]
    calls.clear()
    ctx = RunContext(device="cpu", seed=0, batch_size=1, work_dir=tmp_path, progress=False)
    assert isinstance(dict((b[0], o[0]) for b, o in ctx.isolated(range(6), fn))[4], ValueError)
    assert calls.count([4]) == 1
    with pytest.raises(ValueError, match="bad item 4"):
        list(RunContext(device="cpu", seed=0, batch_size=3, work_dir=tmp_path, progress=False)
             .isolated(range(8), fn, reraise=(ValueError,)))
