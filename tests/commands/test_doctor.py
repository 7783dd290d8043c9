"""``countboard doctor`` on a store with one inconsistency of each kind: listed, repaired, then clean."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from countboard.cli import main
from countboard.index import build_index
from countboard.tracking import store as st
from countboard.tracking import tags as tg
from countboard.tracking import tracker_from_config
from countboard.tracking.lease import HEARTBEAT_TAG, HOST_TAG, Lease, list_leases


def _broken_store(tmp_path: Path):
    store = tmp_path / "mlruns"
    tracker = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(store)}))
    exp = tracker.experiment_id("countboard")
    lease = Lease(tracker, exp, "stale-key", ttl_s=60)
    assert lease.acquire()
    lease._stop.set()
    # a holder on another host that stopped heartbeating (one on this host is live while its process runs)
    tracker.set_tags(lease.run_id, {HEARTBEAT_TAG: f"{time.time() - 3600:.3f}", HOST_TAG: "another-host"})
    orphan = tracker.create_run(exp, "a · b · c", {tg.ROLE: "cell", "config_hash": "h1"})
    parent = tracker.create_run(exp, "sweep x", {tg.ROLE: "sweep", "sweep_hash": "s"})
    child = tracker.create_run(exp, "a · b · d", {tg.ROLE: "cell", "config_hash": "h2"}, parent)
    tracker.log_params(child, {"seed": 0})
    tracker.log_json(child, {"seed": 0}, "config.yaml")
    tracker.set_status(child, st.FINISHED)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    killed_import = tracker.create_run(exp, "import x", {"owner": f"{socket.gethostname()}:{dead.stdout.strip()}",
                                                         "config_hash": "i1"})
    bare = tracker.create_run(exp, "a · b · e", {tg.ROLE: "cell", "config_hash": "h3"})
    tracker.set_status(bare, st.FINISHED)
    build_index(tracker.uri, store / "index.duckdb")
    time.sleep(0.01)
    tracker.create_run(exp, "later", {"config_hash": "h4"})
    (store / "artifacts" / "countboard" / "0123456789abcdef").mkdir(parents=True)
    return store, tracker, exp, dict(orphan=orphan, parent=parent, bare=bare, killed_import=killed_import)


def test_doctor_lists_then_repairs_then_finds_nothing(tmp_path, capsys):
    store, tracker, exp, runs = _broken_store(tmp_path)
    assert main(["doctor", "--store", str(store)]) == 1
    out = capsys.readouterr().out
    for kind in ("[lease]", "[orphan]", "[parent]", "[config]", "[artifacts]", "[index]"):
        assert kind in out, (kind, out)
    assert tracker.get_status(runs["orphan"]) == st.RUNNING  # a dry run changes nothing

    assert main(["doctor", "--store", str(store), "--fix"]) == 0
    capsys.readouterr()
    assert tracker.get_status(runs["orphan"]) == st.KILLED
    assert tracker.get_status(runs["parent"]) == st.FINISHED
    assert tracker.get_status(runs["bare"]) == st.FAILED
    assert tracker.get_status(runs["killed_import"]) == st.KILLED
    assert list_leases(tracker, exp) == []
    assert (store / "lost+found" / "countboard" / "0123456789abcdef").is_dir()

    assert main(["doctor", "--store", str(store)]) == 0
    assert "nothing to repair" in capsys.readouterr().out
    assert main(["doctor", "--store", str(store), "--fix"]) == 0  # idempotent


def test_doctor_on_a_missing_store_is_one_line(tmp_path, capsys):
    assert main(["doctor", "--store", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no MLflow store at") and "Traceback" not in err
