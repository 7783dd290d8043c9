"""Inputs decoded ahead by DataLoader workers: the same inputs, in the same order, with the same failures."""

from __future__ import annotations

import logging
import os

import pytest

from countboard.inputs import MAX_AUTO_WORKERS, InputStream, UnreadableInput, resolve_workers


class Store:
    """Inputs by key; ``bad`` keys raise OSError; ``odd`` keys raise an exception that cannot be pickled back;
    ``deadly`` keys end the worker process that reads them (never the test's own process)."""

    def __init__(self, bad=(), odd=(), deadly=(), main_pid=None):
        self.bad, self.odd, self.deadly, self.main_pid = set(bad), set(odd), set(deadly), main_pid

    def load(self, key: str) -> dict:
        if key in self.bad:
            raise OSError(f"cannot identify image file {key!r}")
        if key in self.odd:
            raise Unpicklable(key, 3)
        if key in self.deadly and os.getpid() != self.main_pid:
            os._exit(3)
        return {"key": key, "pid": os.getpid()}


class Unpicklable(Exception):
    def __init__(self, key: str, code: int):  # two arguments: pickling replays only the message
        super().__init__(f"decoder error {code} in {key}")


def _take(stream: InputStream, keys: list[str]) -> list[object]:
    out = []
    for k in keys:
        try:
            out.append(stream.get(k)["key"])
        except Exception as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


KEYS = [f"k{i:02d}" for i in range(12)]


def test_workers_give_the_inputs_and_failures_of_the_job_process():
    store = Store(bad={"k03", "k07"})
    asked = [*KEYS[:5], "k05", *KEYS[5:], "zz"]  # a listed key asked twice, one never listed
    listed = [*KEYS[:5], "k05", *KEYS[5:]]
    alone = _take(InputStream(store.load, listed, num_workers=0), asked)
    with InputStream(store.load, listed, num_workers=2) as stream:
        ahead = _take(stream, asked)
        assert stream.get(KEYS[1])["pid"] == os.getpid()  # asked again after its read was taken: read here
    assert ahead == alone
    assert alone[3] == "OSError: cannot identify image file 'k03'" and alone[-1] == "zz"


def test_workers_read_in_other_processes_and_out_of_order_requests_wait_for_their_turn():
    store = Store()
    with InputStream(store.load, KEYS, num_workers=2) as stream:
        later, first = stream.get("k04"), stream.get("k00")
        assert (later["key"], first["key"]) == ("k04", "k00")
        assert {later["pid"], first["pid"]} - {os.getpid()} == {later["pid"], first["pid"]}
        assert [stream.get(k)["key"] for k in KEYS[1:4] + KEYS[5:]] == KEYS[1:4] + KEYS[5:]


def test_an_exception_that_cannot_travel_keeps_its_text():
    with InputStream(Store(odd={"k01"}).load, KEYS[:3], num_workers=1) as stream:
        assert stream.get("k00")["key"] == "k00"
        with pytest.raises(UnreadableInput, match=r"Unpicklable: decoder error 3 in k01"):
            stream.get("k01")
        assert stream.get("k02")["key"] == "k02"


@pytest.mark.slow  # the loader looks at its workers every 5 s (torch's MP_STATUS_CHECK_INTERVAL)
def test_a_worker_that_dies_leaves_the_rest_to_the_job_process(caplog):
    store = Store(deadly={"k04"}, main_pid=os.getpid())
    with caplog.at_level(logging.WARNING, logger="countboard"), \
            InputStream(store.load, KEYS, num_workers=2) as stream:
        got = [stream.get(k) for k in KEYS]
    assert [g["key"] for g in got] == KEYS
    assert got[4]["pid"] == os.getpid() and got[-1]["pid"] == os.getpid()
    assert "input loader workers stopped" in caplog.text


def test_auto_workers_leave_a_core_to_the_model(monkeypatch):
    import countboard.inputs as inputs

    monkeypatch.setattr(inputs, "usable_cpus", lambda: 1)
    assert resolve_workers("auto") == 0
    monkeypatch.setattr(inputs, "usable_cpus", lambda: 3)
    assert resolve_workers("auto") == 2 and resolve_workers(None) == 2
    monkeypatch.setattr(inputs, "usable_cpus", lambda: 64)
    assert resolve_workers("auto") == MAX_AUTO_WORKERS
    assert resolve_workers(0) == 0 and resolve_workers(5) == 5


class _ForeignContext:
    """A process-wide default start method whose processes the DataLoader cannot start (as joblib's loky backend
    installs in the jobs it runs)."""

    def __getattr__(self, name):
        raise AttributeError(f"'Process' object has no attribute {name!r}")


def test_workers_start_in_a_job_whose_default_start_method_is_foreign(monkeypatch):
    import multiprocessing.context

    keys = [f"k{i}" for i in range(6)]
    monkeypatch.setattr(multiprocessing.context, "_default_context", _ForeignContext())
    with InputStream(Store().load, keys, num_workers=2) as stream:
        assert stream.num_workers == 2
        got = [stream.get(k) for k in keys]
    assert [g["key"] for g in got] == keys and all(g["pid"] != os.getpid() for g in got)


def test_workers_that_cannot_start_leave_the_reads_to_the_job_process(monkeypatch, caplog):
    import torch.utils.data

    def refuse(self):
        raise AssertionError("daemonic processes are not allowed to have children")

    monkeypatch.setattr(torch.utils.data.DataLoader, "__iter__", refuse)
    keys = ["a", "b", "bad"]
    with caplog.at_level(logging.WARNING, logger="countboard"), \
            InputStream(Store(bad={"bad"}).load, keys, num_workers=2) as stream:
        assert stream.num_workers == 0
        assert _take(stream, keys)[:2] == ["a", "b"]
        with pytest.raises(OSError):
            stream.get("bad")
    assert "could not start" in caplog.text


@pytest.mark.slow
def test_a_joblib_sweep_decodes_with_workers(tmp_path):
    """Two cells run by Hydra's joblib launcher (loky processes, as `make demo` runs them) read through workers."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "countboard.commands.sweep", "-m", "model=oracle,class_blind",
         "dataset=synthetic_shapes", "task=praco_negative", f"tracking.store_dir={tmp_path / 'store'}",
         "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "num_workers=2", "progress=false",
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert out.count(" · synthetic_shapes · praco_negative → run ") == 2 and "could not start" not in out, out[-2000:]
