"""When the engine writes a chunk's checkpoint: before the next chunk's units, or, for a task that says when its
device work is queued, while that work runs; and on every way out, before the job's error is reported."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from countboard import engine
from countboard.results import RunContext, Task, TaskResult


class Store:
    """A tracker that keeps parts in memory and logs what happens, in order."""

    def __init__(self, events: list[str], fail_on_write: int | None = None):
        self.events, self.parts, self.fail_on_write = events, {}, fail_on_write

    def list_artifacts(self, run_id, folder):
        return sorted(self.parts)

    def download(self, run_id, name, tmp):
        path = Path(tmp) / Path(name).name
        path.write_bytes(self.parts[name])
        return path

    def log_file(self, run_id, path, folder):
        index = int(path.name.split("-")[1])
        if index == self.fail_on_write:
            raise ConnectionRefusedError(111, "Connection refused")
        self.parts[f"{folder}/{path.name}"] = path.read_bytes()
        self.events.append(f"write {index}")

    def log_json(self, run_id, obj, name):
        pass

    def set_tags(self, run_id, tags):
        pass


class Units(Task):
    """Eight units in chunks; logs each chunk's start and end; queues its "device work" after its first unit."""

    name = "units"
    family = "engine"

    def __init__(self, events: list[str], queued: bool, stop_at: str | None = None,
                 stop: type[BaseException] = RuntimeError):
        self.events, self.stop_at, self.stop = events, stop_at, stop
        self.writes_while_queued = queued

    def units(self, model, dataset, ctx):
        return [f"u{i}" for i in range(8)]

    def run_units(self, model, dataset, unit_ids, ctx):
        self.events.append(f"start {unit_ids[0]}")
        out = []
        for k, uid in enumerate(unit_ids):
            if uid == self.stop_at:
                raise self.stop(f"stopped at {uid}")
            out.append({"unit_id": uid, "value": float(k)})
            if k == 0 and self.writes_while_queued:
                self.events.append("queued")
                ctx.queued()
        self.events.append(f"end {unit_ids[0]}")
        return out

    def summarize(self, records, model, dataset, ctx):
        return TaskResult(metrics={})


def _run(tmp_path, task: Units, store: Store, progress: engine.Progress | None = None):
    cfg = OmegaConf.create({"model": {}, "dataset": {}, "task": {}, "num_workers": 0})
    cell = SimpleNamespace(tracker=store, run_id="r" * 32, lease=None, name="units", cfg=cfg)
    ctx = RunContext(device="cpu", seed=0, batch_size=4, work_dir=tmp_path, progress=False)
    return engine.compute_units(task, None, None, ctx, cell, every=2, progress=progress)


def test_a_task_without_queued_work_has_its_chunk_written_before_the_next_starts(tmp_path):
    events: list[str] = []
    ok, failed = _run(tmp_path, Units(events, queued=False), Store(events))
    assert events == ["start u0", "end u0", "write 0", "start u2", "end u2", "write 1", "start u4", "end u4",
                      "write 2", "start u6", "end u6", "write 3"]
    assert ok["unit_id"].tolist() == [f"u{i}" for i in range(8)] and failed.empty


def test_a_chunk_is_written_while_the_next_chunks_device_work_runs(tmp_path):
    events: list[str] = []
    ok, _ = _run(tmp_path, Units(events, queued=True), Store(events))
    assert events == ["start u0", "queued", "end u0", "start u2", "queued", "write 0", "end u2",
                      "start u4", "queued", "write 1", "end u4", "start u6", "queued", "write 2", "end u6", "write 3"]
    assert len(ok) == 8


@pytest.mark.parametrize("stop", [RuntimeError, KeyboardInterrupt, engine.Terminated])
def test_a_job_stopped_before_it_queued_work_keeps_the_chunk_it_computed(tmp_path, stop):
    events: list[str] = []
    store = Store(events)
    with pytest.raises(stop):
        _run(tmp_path, Units(events, queued=True, stop_at="u4", stop=stop), store)
    assert events[-2:] == ["start u4", "write 1"]  # the second chunk reached the store before the error
    again: list[str] = []
    store.events = again
    ok, _ = _run(tmp_path, Units(again, queued=True), store)  # the rerun computes only the units not written
    assert again[0] == "start u4" and len(ok) == 8


def test_a_part_the_store_refuses_while_queued_names_the_checkpoint_step(tmp_path):
    events: list[str] = []
    progress = engine.Progress(name="units", uri="http://127.0.0.1:5000")
    with pytest.raises(ConnectionRefusedError):
        _run(tmp_path, Units(events, queued=True), Store(events, fail_on_write=1), progress)
    assert progress.step == "writing a checkpoint" and progress.saved == 2
    line = progress.lost_store(ConnectionRefusedError(111, "Connection refused"))
    assert "writing a checkpoint" in line and "2 of 8 units are checkpointed" in line


def test_praco_tasks_say_when_their_device_work_is_queued():
    from countboard.counting.tasks.praco import PracoNegative
    from countboard.counting.tasks.praco_multiclass import PracoMulticlass

    assert PracoNegative.writes_while_queued and PracoMulticlass.writes_while_queued
    assert not Task.writes_while_queued
    ctx = RunContext(device="cpu", seed=0, batch_size=1, work_dir=Path("."))
    calls = []
    ctx.on_queued = lambda: calls.append(1)
    ctx.queued()
    ctx.queued()
    assert calls == [1] and ctx.on_queued is None
