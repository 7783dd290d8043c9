"""``doctor`` and its owner rule on a sweep's parent run owned by a real process: left while the process lives
(between two cells its parent has no RUNNING child), repaired once it is gone; a lease of a live process is kept
however late its heartbeat."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from omegaconf import OmegaConf

from countboard.commands.doctor import LIVE, diagnose
from countboard.tracking import tags as tg
from countboard.tracking import tracker_from_config
from countboard.tracking.lease import HEARTBEAT_TAG, Lease

OWNER = textwrap.dedent("""
    import sys
    from omegaconf import OmegaConf
    from countboard.tracking import tracker_from_config
    from countboard.tracking import tags as tg
    from countboard.tracking.lease import OwnerHeartbeat
    t = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": sys.argv[1]}))
    exp = t.experiment_id("sweeps")
    run = t.create_run(exp, "sweep seed=0,1", {tg.ROLE: tg.ROLE_SWEEP, tg.SWEEP_HASH: "h"})
    child = t.create_run(exp, "cell", {tg.ROLE: tg.ROLE_CELL, tg.CONFIG_HASH: "c"}, run)
    t.set_status(child, "KILLED")  # its first cell ended (stopped), its next is not yet made
    beat = OwnerHeartbeat(t, run, ttl_s=float(sys.argv[2])).start()
    print(run, flush=True)
    sys.stdin.read()  # until the test closes it (or kills this process)
    beat.stop()
""")


@pytest.fixture
def store(tmp_path):
    folder = tmp_path / "mlruns"
    tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(folder)})).check()
    return folder


def _owner(store, ttl_s: float = 60.0) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(store), str(ttl_s)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def test_a_live_sweep_owns_its_parent_and_a_dead_one_leaves_it_to_repair(store):
    proc, run_id = _owner(store)
    try:
        found = diagnose(str(store))
        left = [f for f in found if f.kind == LIVE]
        assert [f.kind for f in found if f.kind not in (LIVE, "index")] == []
        assert len(left) == 1 and f"sweep run {run_id} is owned by a live sweep (pid {proc.pid} on host " in \
            left[0].what and "heartbeat 0 s ago" in left[0].what
    finally:
        proc.kill()
        proc.wait()
    found = [f for f in diagnose(str(store)) if f.kind != "index"]
    assert [f.kind for f in found] == ["parent"] and f"pid {proc.pid} on this host" in found[0].what
    found[0].fix()
    t = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(store)}))
    assert t.get_status(run_id) == "FAILED"  # as its one child
    assert [f for f in diagnose(str(store)) if f.kind != "index"] == []


def test_the_repair_checks_the_owner_again_when_it_is_applied(store, capsys):
    t = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(store)}))
    exp = t.experiment_id("sweeps")
    run_id = t.create_run(exp, "sweep", {tg.ROLE: tg.ROLE_SWEEP, tg.SWEEP_HASH: "h"})
    found = [f for f in diagnose(str(store)) if f.kind == "parent"]  # no owner record: an older sweep's parent
    assert len(found) == 1
    proc, _ = _owner(store)  # a sweep starts meanwhile (another parent)...
    try:
        from countboard.tracking.lease import owner_tags

        t.set_tags(run_id, {**owner_tags(), tg.OWNER_HEARTBEAT: f"{time.time():.3f}"})  # ...and this one is owned
        found[0].fix()
        assert t.get_status(run_id) == "RUNNING"
        assert f"[{LIVE}] sweep run {run_id} is owned by a live sweep" in capsys.readouterr().out
    finally:
        proc.kill()
        proc.wait()


def test_a_lease_of_a_live_process_here_is_kept_however_late_its_heartbeat(store):
    t = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(store)}))
    exp = t.experiment_id("exp")
    lease = Lease(t, exp, "c", ttl_s=30)
    assert lease.acquire()
    lease._stop.set()  # a process too busy to heartbeat, but alive
    t.set_tags(lease.run_id, {HEARTBEAT_TAG: f"{time.time() - 3600:.3f}"})
    t.create_run(exp, "cell", {tg.ROLE: tg.ROLE_CELL, tg.CONFIG_HASH: "c"})
    assert [f.kind for f in diagnose(str(store), ttl_s=30) if f.kind != "index"] == []
    lease.release()  # the cell's run is RUNNING with no lease and no owner record: its owner is gone
    assert [f.kind for f in diagnose(str(store), ttl_s=30) if f.kind != "index"] == ["orphan"]


def test_an_owner_record_sent_to_another_process_renews_nothing(store):
    import pickle

    from countboard.tracking.lease import OwnerHeartbeat

    t = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(store)}))
    run_id = t.create_run(t.experiment_id("sweeps"), "sweep", {tg.ROLE: tg.ROLE_SWEEP})
    beat = OwnerHeartbeat(t, run_id, ttl_s=60).start()
    try:
        copy = pickle.loads(pickle.dumps(beat))  # a launcher pickles the sweep's callbacks
        assert copy.run_id == run_id and copy._thread is None and copy._stop.is_set()
    finally:
        beat.stop()
