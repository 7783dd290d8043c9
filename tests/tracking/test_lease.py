"""Leases against a real SQLite store: one holder per key, release, expiry and take-over."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

from countboard.tracking import tracker_from_config
from countboard.tracking.lease import HEARTBEAT_TAG, PID_TAG, START_TAG, Lease, LeaseInfo, list_leases


@pytest.fixture
def tracker(tmp_path):
    t = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(tmp_path / "mlruns")}))
    t.check()
    return t


def test_one_holder_per_key_until_release(tracker):
    exp = tracker.experiment_id("exp")
    first, second, other = Lease(tracker, exp, "h1"), Lease(tracker, exp, "h1"), Lease(tracker, exp, "h2")
    assert first.acquire()
    assert not second.acquire()
    assert second.holder is not None and second.holder.run_id == first.run_id
    assert other.acquire()  # another key is independent
    first.release()
    assert second.acquire()
    second.release()
    other.release()
    assert list_leases(tracker, exp) == []
    first.release()  # idempotent


def test_silent_holder_expires_and_is_taken_over(tracker):
    exp = tracker.experiment_id("exp")
    stale = Lease(tracker, exp, "h", ttl_s=30)
    assert stale.acquire()
    stale._stop.set()  # stop heartbeating, as a frozen process would
    tracker.set_tags(stale.run_id, {HEARTBEAT_TAG: f"{time.time() - 31:.3f}"})
    taker = Lease(tracker, exp, "h", ttl_s=30)
    assert taker.acquire()
    assert [lease.run_id for lease in list_leases(tracker, exp, "h")] == [taker.run_id]
    taker.release()


def test_lease_of_a_dead_process_on_this_host_expires_at_once(tracker):
    exp = tracker.experiment_id("exp")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    held = Lease(tracker, exp, "h", ttl_s=3600)
    assert held.acquire()
    held._stop.set()
    tracker.set_tags(held.run_id, {PID_TAG: dead.stdout.strip(), START_TAG: "1"})
    assert Lease(tracker, exp, "h", ttl_s=3600).acquire()


def test_lease_info_expiry_rules():
    now = 1000.0
    info = LeaseInfo("r", "k", "elsewhere", 1, "", heartbeat=now - 10, state="held")
    assert not info.expired(ttl_s=60, now=now)
    assert info.expired(ttl_s=5, now=now)
    assert info.owner() == "elsewhere:1"


def test_wait_gives_up_after_timeout(tracker):
    exp = tracker.experiment_id("exp")
    holder = Lease(tracker, exp, "h")
    assert holder.acquire()
    t0 = time.monotonic()
    assert not Lease(tracker, exp, "h").wait(poll_s=0.1, timeout_s=0.5)
    assert time.monotonic() - t0 < 10
    holder.release()
