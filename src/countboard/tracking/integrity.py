"""What state a store's ``mlflow.db`` is in, read without writing; and recovery of a damaged one.

Every open checks the file cheaply (``check_db``: the SQLite header, ``PRAGMA quick_check``, the MLflow schema);
``countboard doctor`` runs the full ``PRAGMA integrity_check`` (``full=True``). Only a file that is provably a
half-made MLflow store (empty, or MLflow's tables without a run) may be replaced; a foreign or damaged file is
refused with one line that names it and the way out, and ``recover`` copies what SQLite can still read into a new
file, keeping the original beside it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from countboard.errors import TrackingStoreError
from countboard.tracking.address import sqlite_uri

SQLITE_HEADER = b"SQLite format 3\x00"
SIDECARS = ("-wal", "-shm", "-journal")
OK, HALF, FOREIGN, DAMAGED, OLD = "ok", "half-created", "foreign", "damaged", "old-schema"


@dataclass(frozen=True)
class Health:
    """The state of one ``mlflow.db``: ``kind`` (``ok``, ``half-created``, ``foreign``, ``damaged``,
    ``old-schema``) and what was seen."""

    kind: str
    detail: str = ""
    runs: int | None = None

    @property
    def ok(self) -> bool:
        return self.kind == OK


def connect_ro(db: Path) -> sqlite3.Connection:
    """A read-only connection that writes nothing, not even a lock or WAL index file.

    ``mode=ro`` needs the ``-shm`` file of a WAL database; on a read-only folder where it is missing, the file is
    opened ``immutable`` (nobody can be writing to it there).
    """
    con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        con.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return con
    except sqlite3.OperationalError:
        con.close()
        if os.access(db.parent, os.W_OK):
            raise
    return sqlite3.connect(f"{db.as_uri()}?immutable=1", uri=True, timeout=30)


@functools.cache
def _head_revision() -> str:
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def _header(db: Path) -> bytes:
    with open(db, "rb") as fh:
        return fh.read(100)


def check_db(db: Path, full: bool = False) -> Health:
    """The state of ``db`` (which exists), read-only: header, ``quick_check`` (``integrity_check`` with
    ``full``), then MLflow's tables and schema revision."""
    size = db.stat().st_size
    if size == 0:
        return Health(HALF, "the file is empty", 0)
    head = _header(db)
    if not head.startswith(SQLITE_HEADER):
        return Health(FOREIGN, f"it is not an SQLite database (it starts with {head[:16]!r})")
    if len(head) < 100 or size < 512:
        return Health(DAMAGED, f"it is cut short ({size} bytes, less than one database page)")
    try:
        con = connect_ro(db)
        try:
            pragma = "integrity_check(20)" if full else "quick_check(20)"
            problems = [r[0] for r in con.execute(f"PRAGMA {pragma}").fetchall() if r[0] != "ok"]
            if problems:
                return Health(DAMAGED, f"SQLite's {pragma.split('(')[0]} reports: {'; '.join(problems)[:300]}")
            tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            runs = con.execute("SELECT count(*) FROM runs").fetchone()[0] if "runs" in tables else 0
            revision = (con.execute("SELECT version_num FROM alembic_version").fetchone()
                        if "alembic_version" in tables else None)
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        return Health(DAMAGED, f"SQLite cannot read it ({exc})")
    if not tables & {"experiments", "alembic_version", "runs"}:
        what = f"its tables are {', '.join(sorted(tables)[:5])}" if tables else "it has no tables"
        return Health(HALF if not tables else FOREIGN, f"it is an SQLite database but not an MLflow store ({what})",
                      0 if not tables else None)
    if "alembic_version" not in tables or "experiments" not in tables:
        return Health(HALF if not runs else DAMAGED, "its MLflow tables were never all created", runs)
    target = _head_revision()
    if revision is None or revision[0] != target:
        seen = revision[0] if revision else "none"
        if runs:
            return Health(OLD, f"it has MLflow schema {seen}, this MLflow expects {target}", runs)
        return Health(HALF, f"its schema migration stopped at {seen} (of {target})", 0)
    return Health(OK, "", runs)


def refusal(db: Path, health: Health) -> TrackingStoreError:
    """The one-line error for a store that cannot be opened, with the way out."""
    store = db.parent
    if health.kind == FOREIGN:
        return TrackingStoreError(
            f"{db} is not an MLflow store: {health.detail}. Nothing was changed; move that file away or point "
            "--store / tracking.store_dir at the store's folder")
    if health.kind == OLD:
        return TrackingStoreError(f"the store {db} {health.detail}; back it up, then run "
                                  f"`mlflow db upgrade {sqlite_uri(db)}`")
    if health.kind == HALF:
        return TrackingStoreError(f"the store {db} is half-created ({health.detail}); a sweep or "
                                  f"`countboard doctor --store {store} --fix` creates it again")
    return TrackingStoreError(
        f"the store {db} is damaged: {health.detail}. Nothing was changed; run `countboard doctor --store {store} "
        "--fix` to recover what SQLite can read into a new mlflow.db (the damaged file is kept beside it)")


def set_aside(db: Path, label: str) -> Path:
    """Move ``db`` and its sidecar files to ``<db>.<label>-<time>-<pid>``; returns the new name."""
    aside = db.with_name(f"{db.name}.{label}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    for suffix in ("", *SIDECARS):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{db}{suffix}", f"{aside}{suffix}")
    return aside


def _copy_schema_and_rows(src: sqlite3.Connection, dst: sqlite3.Connection) -> None:
    """Every object of ``src`` (tables first), and every row SQLite can still read of each table: forwards until
    the first unreadable page, then backwards from the end."""
    objects = src.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE "
                          "'sqlite_%' ORDER BY type != 'table'").fetchall()
    for _, _, sql in objects:
        with contextlib.suppress(sqlite3.DatabaseError):
            dst.execute(sql)
    for kind, name, _ in objects:
        if kind != "table":
            continue
        quoted = '"' + name.replace('"', '""') + '"'
        for order in ("ASC", "DESC"):
            try:
                cur = src.execute(f"SELECT * FROM {quoted} ORDER BY rowid {order}")
                width = len(cur.description)
                insert = f"INSERT OR IGNORE INTO {quoted} VALUES ({', '.join('?' * width)})"
                for row in cur:
                    dst.execute(insert, row)
                break  # read whole
            except sqlite3.DatabaseError:
                continue
    dst.commit()


def recover(db: Path) -> tuple[Path, Health]:
    """Copy what SQLite can read of the damaged ``db`` into a new ``mlflow.db``, keeping the original.

    SQLite's own ``.recover`` (the ``sqlite3`` command, when installed and able) is tried first; otherwise, or
    when its result is not a whole MLflow store, each table is copied row by row. Returns the name the damaged
    file was kept under, and the state of the new store.

    Raises:
        TrackingStoreError: Nothing usable could be recovered (the damaged file is left where it was).
    """
    out = db.with_name(f"{db.name}.recovered-{os.getpid()}")
    for attempt in (_recover_cli, _recover_rows):
        out.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            attempt(db, out)
            health = check_db(out, full=True) if out.is_file() else Health(DAMAGED, "nothing recovered")
            if health.kind == OK:
                break
    else:
        out.unlink(missing_ok=True)
        raise TrackingStoreError(f"could not recover {db}: SQLite cannot read its MLflow tables; restore it from a "
                                 "backup (nothing was changed)")
    con = sqlite3.connect(out)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()
    aside = set_aside(db, "damaged")
    os.replace(out, db)
    return aside, health


def _recover_cli(db: Path, out: Path) -> None:
    cli = shutil.which("sqlite3")
    if cli is None:
        raise FileNotFoundError("no sqlite3 command")
    dump = subprocess.run([cli, str(db), ".recover"], capture_output=True, timeout=600, check=True)
    subprocess.run([cli, str(out)], input=dump.stdout, capture_output=True, timeout=600, check=True)


def _recover_rows(db: Path, out: Path) -> None:
    src = connect_ro(db)
    dst = sqlite3.connect(out)
    try:
        _copy_schema_and_rows(src, dst)
    finally:
        src.close()
        dst.close()
