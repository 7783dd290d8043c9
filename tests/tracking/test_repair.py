"""The swap of a recovered database (``tracking.repair``): stopped at each step and completed, ``mlflow.db`` is at
every moment the damaged database or the recovered one; a folder that lost its database is never a new store."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from countboard.errors import TrackingStoreError
from countboard.tracking import failpoints, repair
from countboard.tracking.local_store import ensure_local_store

STEPS = ["repair_intent", "repair_kept", "repair_sidecars", "repair_swapped"]


class Stopped(Exception):
    pass


def _db(path: Path, marker: str, wal: bool = False) -> None:
    con = sqlite3.connect(path)
    if wal:
        con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (v TEXT)")
    con.execute("INSERT INTO t VALUES (?)", (marker,))
    con.commit()
    con.close()


def _marker(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT v FROM t").fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize("step", STEPS)
def test_a_swap_stopped_at_each_step_is_completed(tmp_path, monkeypatch, step):
    db, built, kept = tmp_path / "mlflow.db", tmp_path / "mlflow.db.recovered-1", tmp_path / "mlflow.db.damaged-x-1"
    _db(db, "old")
    Path(f"{db}-wal").write_bytes(b"wal of the damaged database")
    _db(built, "new")
    old, new = db.read_bytes(), built.read_bytes()

    def hit(name):
        if name == step:
            raise Stopped(name)

    monkeypatch.setattr(failpoints, "hit", hit)
    with pytest.raises(Stopped):
        repair.swap_in(db, built, kept)
    assert db.read_bytes() in (old, new)  # never missing
    if step != "repair_swapped":
        assert repair.pending(db) == (built, kept)
        assert Path(f"{db}-wal").exists() == (step in ("repair_intent", "repair_kept"))
    monkeypatch.setattr(failpoints, "hit", lambda name: None)
    assert repair.complete(db) and not repair.complete(db)  # idempotent
    assert Path(f"{kept}-wal").read_bytes() == b"wal of the damaged database"
    assert db.read_bytes() == new and kept.read_bytes() == old
    assert not Path(f"{db}-wal").exists() and not built.exists() and not repair.intent_path(db).exists()


def test_a_pending_repair_is_completed_by_a_writer_and_refused_by_a_reader(tmp_path, monkeypatch):
    db, built = tmp_path / "mlflow.db", tmp_path / "mlflow.db.recovered-1"
    _db(db, "old")
    _db(built, "new")
    monkeypatch.setattr(failpoints, "hit", lambda name: (_ for _ in ()).throw(Stopped()) if name ==
                        "repair_kept" else None)
    with pytest.raises(Stopped):
        repair.swap_in(db, built, tmp_path / "mlflow.db.damaged-x-1")
    with pytest.raises(TrackingStoreError, match="a repair of .* was stopped .* doctor --store .* --fix"):
        ensure_local_store(tmp_path, create=False)
    monkeypatch.setattr(failpoints, "hit", lambda name: None)
    monkeypatch.setattr(repair, "missing_database", lambda db: None)
    monkeypatch.setattr("countboard.tracking.local_store.check_db",
                        lambda db: type("H", (), {"ok": True, "kind": "ok"})())
    monkeypatch.setattr("countboard.tracking.local_store.rewrite_locations", lambda db: None)
    assert ensure_local_store(tmp_path) == db
    assert _marker(db) == "new" and repair.pending(db) is None


def test_a_folder_that_lost_its_database_is_not_a_new_store(tmp_path):
    db = tmp_path / "mlflow.db"
    Path(f"{db}-wal").write_bytes(b"")
    for create in (True, False):
        with pytest.raises(TrackingStoreError, match="has no mlflow.db but holds what one leaves .*mlflow.db-wal"):
            ensure_local_store(tmp_path, create=create)
    assert not db.exists()
    assert repair.restorable(db) is None
    _db(tmp_path / "mlflow.db.damaged-20250101T000000-7", "kept")
    assert repair.restore(db).name == "mlflow.db.damaged-20250101T000000-7"
    assert _marker(db) == "kept" and _marker(tmp_path / "mlflow.db.damaged-20250101T000000-7") == "kept"


def test_builds_of_stopped_repairs_are_listed_but_not_a_live_one(tmp_path):
    db = tmp_path / "mlflow.db"
    _db(db, "old")
    dead, live = tmp_path / "mlflow.db.recovered-999999999", tmp_path / f"mlflow.db.recovered-{os.getpid()}"
    for path in (dead, live):
        _db(path, "partial")
    Path(f"{dead}-wal").write_bytes(b"")
    assert repair.stopped_builds(db) == [dead]
    repair.delete_build(dead)
    assert not dead.exists() and not Path(f"{dead}-wal").exists() and live.exists()
