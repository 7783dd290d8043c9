"""A damaged or foreign ``mlflow.db`` is named and refused, never replaced; ``doctor --fix`` recovers what SQLite
can into a new file, keeps the original, and moves no artifact it cannot prove is an orphan."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from countboard.errors import TrackingStoreError
from countboard.tracking import integrity
from countboard.tracking.local_store import ensure_local_store
from tests.faults.conftest import countboard, snapshot


def garble_pages(db: Path, table: str) -> list[int]:
    """Overwrite the first 64 bytes of every page of ``table`` (its b-tree headers); returns the page numbers."""
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the main file
        size = con.execute("PRAGMA page_size").fetchone()[0]
        pages = [p for (p,) in con.execute("SELECT pageno FROM dbstat WHERE name = ?", (table,))]
    with open(db, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * size)
            fh.write(b"\xab" * 64)
    return pages


def _one_line_error(proc, *words: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(lines) == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("damage", ["garbled", "truncated"])
def test_a_damaged_store_is_refused_then_recovered_keeping_the_original(store_copy, tmp_path, damage):
    db = store_copy / "mlflow.db"
    if damage == "garbled":
        garble_pages(db, "params")
    else:
        with sqlite3.connect(db) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.write_bytes(db.read_bytes()[: db.stat().st_size * 2 // 3])
    damaged = db.read_bytes()
    artifacts = snapshot(store_copy / "artifacts")
    assert integrity.check_db(db).kind == integrity.DAMAGED

    index = countboard("index", "--store", str(store_copy), "--db", str(tmp_path / "i.duckdb"), cwd=tmp_path)
    _one_line_error(index, "damaged", "doctor", "--fix")
    assert db.read_bytes() == damaged and not (tmp_path / "i.duckdb").exists()

    doctor = countboard("doctor", "--store", str(store_copy), cwd=tmp_path)
    assert doctor.returncode == 1 and "is damaged" in doctor.stdout and "lost+found" not in doctor.stdout
    fixed = countboard("doctor", "--store", str(store_copy), "--fix", cwd=tmp_path)
    assert "recovered" in fixed.stdout, fixed.stdout + fixed.stderr
    kept = [p for p in store_copy.glob("mlflow.db.damaged-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(kept) == 1 and kept[0].read_bytes() == damaged  # the original, byte for byte
    assert integrity.check_db(db, full=True).ok
    assert snapshot(store_copy / "artifacts") == artifacts  # nothing moved to lost+found
    assert not (store_copy / "lost+found").exists()
    assert countboard("index", "--store", str(store_copy), "--db", str(tmp_path / "i.duckdb"),
                      cwd=tmp_path).returncode == 0


def test_a_foreign_file_is_never_replaced(tmp_path):
    store = tmp_path / "s"
    store.mkdir()
    db = store / "mlflow.db"
    db.write_text("name,count\ncats,3\n")  # a CSV someone saved under that name
    with pytest.raises(TrackingStoreError, match="is not an MLflow store: it is not an SQLite database"):
        ensure_local_store(store)
    other = tmp_path / "o"
    other.mkdir()
    with sqlite3.connect(other / "mlflow.db") as con:  # an SQLite file of another program
        con.execute("CREATE TABLE notes (body TEXT)")
        con.execute("INSERT INTO notes VALUES ('keep me')")
    with pytest.raises(TrackingStoreError, match="not an MLflow store"):
        ensure_local_store(other)
    before = {p: snapshot(p) for p in (store, other)}
    for folder in (store, other):
        fixed = countboard("doctor", "--store", str(folder), "--fix", cwd=tmp_path)
        assert fixed.returncode == 1 and "never replaced" in fixed.stdout
    assert {p: snapshot(p) for p in (store, other)} == before
    assert db.read_text() == "name,count\ncats,3\n"
    assert sorted(p.name for p in store.iterdir()) == ["mlflow.db"]


@pytest.mark.slow
def test_a_sweep_on_a_foreign_file_creates_nothing(tmp_path):
    from tests.conftest import run_sweep
    from tests.faults.conftest import TOY

    store = tmp_path / "s"
    store.mkdir()
    (store / "mlflow.db").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 600)
    t0 = time.monotonic()
    proc = run_sweep(TOY, tmp_path, store=store, check=False)
    assert proc.returncode != 0
    assert "not an MLflow store" in proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 120
    assert sorted(p.name for p in store.iterdir()) == ["mlflow.db"]  # no artifacts, no new store, no lock


def test_recovery_copies_every_readable_row(tmp_path):
    db = tmp_path / "x.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE big (id INTEGER PRIMARY KEY, body TEXT)")
        con.executemany("INSERT INTO big VALUES (?, ?)", [(i, "x" * 500) for i in range(400)])
        con.execute("CREATE TABLE small (k TEXT)")
        con.execute("INSERT INTO small VALUES ('kept')")
    with sqlite3.connect(db) as con:  # one leaf in the middle of `big`
        leaves = [p for (p,) in con.execute("SELECT pageno FROM dbstat WHERE name='big' AND pagetype='leaf'")]
    victim = leaves[len(leaves) // 2]
    with open(db, "r+b") as fh:
        fh.seek((victim - 1) * 4096)
        fh.write(b"\xab" * 64)
    out = tmp_path / "y.db"
    integrity._recover_rows(db, out)
    with sqlite3.connect(out) as con:
        ids = [i for (i,) in con.execute("SELECT id FROM big")]
        assert con.execute("SELECT k FROM small").fetchall() == [("kept",)]
    per_page = 400 / len(leaves)
    assert 400 - 2 * per_page <= len(ids) < 400  # all but (about) the rows of the garbled leaf
    assert 0 in ids and 399 in ids


def test_a_report_row_of_several_lines_is_named_in_one_line(tmp_path, monkeypatch):
    """SQLite returns the problems of one b-tree as one row of several lines (``*** in database main ***`` then
    ``On tree page …``): the refusal is still one line."""
    db = tmp_path / "mlflow.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (x)")
    row = "*** in database main ***\n" + "\n".join(f"On tree page 6 cell {c}: Rowid 68 out of order"
                                                  for c in range(26, 10, -1))
    monkeypatch.setattr(integrity, "_read", lambda db, pragma: ([row], {"runs"}, 1, None))
    health = integrity.check_db(db)
    assert health.kind == integrity.DAMAGED and "\n" not in health.detail
    assert health.detail.startswith("SQLite's quick_check reports: On tree page 6 cell 26: Rowid 68 out of order; ")
    assert health.detail.endswith("(16 problems)") and len(health.detail) < 360
    assert "\n" not in str(integrity.refusal(db, health))
