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
import logging
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from countboard.errors import TrackingStoreError
from countboard.tracking.address import sqlite_uri

log = logging.getLogger("countboard")

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
    wal = Path(f"{db}-wal")
    if wal.is_file() and wal.stat().st_size:
        log.warning("%s holds changes not yet checkpointed into %s; a read-only folder cannot apply them, so the "
                    "store reads as of its last checkpoint (open it once where it is writable to apply them)",
                    wal, db.name)
    return sqlite3.connect(f"{db.as_uri()}?immutable=1", uri=True, timeout=30)


@functools.cache
def _head_revision() -> str:
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


#: One read-only descriptor per database file (device, inode), opened on first read and never closed: closing
#: *any* descriptor of a file drops every POSIX lock this process holds on it, the locks of its SQLite
#: connections included (sqlite.org/howtocorrupt.html, 2.2). A WAL connection holds a shared lock on the database
#: file for its whole life, which tells another process's last closing connection that it is not the last; without
#: it, that process checkpoints and deletes the WAL while this one still writes to it: this process's fresh
#: connections then fail with SQLITE_IOERR_SHORT_READ and what it writes next is lost (docs/reliability.md).
_READERS: dict[tuple[int, int], int] = {}
_READERS_LOCK = threading.Lock()


def _read_bytes(db: Path, size: int, offset: int = 0) -> bytes:
    """``size`` bytes of ``db`` from ``offset``, read without ever closing a descriptor of it (``_READERS``)."""
    st = os.stat(db)  # a descriptor keeps its inode allocated, so a (device, inode) pair kept here is never reused
    with _READERS_LOCK:
        for key, kept in list(_READERS.items()):  # a deleted file's locks protect nothing: its descriptor may go
            if key != (st.st_dev, st.st_ino) and os.fstat(kept).st_nlink == 0:
                os.close(_READERS.pop(key))
        fd = _READERS.get((st.st_dev, st.st_ino))
        if fd is None:
            fd = os.open(db, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            opened = os.fstat(fd)  # the file now at ``db``, if it was replaced since the stat
            _READERS.setdefault((opened.st_dev, opened.st_ino), fd)
            fd = _READERS[(opened.st_dev, opened.st_ino)]  # (another descriptor of it already kept: this one leaks
            # rather than being closed, which would drop the locks)
    chunks = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        size, offset = size - len(chunk), offset + len(chunk)
    return b"".join(chunks)


def _header(db: Path) -> bytes:
    return _read_bytes(db, 100)


#: Above this size an open skips ``quick_check``, which reads every page (39 s for a 1.6 GB store of 30,000 runs
#: on the busy test machine); the header, the schema and MLflow's tables are still read, and ``doctor`` checks all.
QUICK_CHECK_MAX_BYTES = 64 * 2**20


def _cut_short(head: bytes, size: int) -> str | None:
    """Why the header says the file is longer than it is (or ends mid-page), else None."""
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return f"its header is damaged (page size {page})"
    pages, valid = int.from_bytes(head[28:32], "big"), head[24:28] == head[92:96]
    if valid and pages and pages * page > size:
        return f"it is cut short: {size} bytes where its header says {pages * page}"
    if size % page:
        return f"it ends in the middle of a page ({size} bytes, pages of {page})"
    return None


#: Reads of a store that another process is writing can meet its lock (a checkpoint, a recovery): retried for
#: about 1.5 s; a lock held throughout leaves the store unchecked (with a warning), any other error counts.
_READ_ATTEMPTS = 6


def lock_error(exc: sqlite3.OperationalError) -> bool:
    """SQLite reports another connection's lock (``database is locked``, busy): it may pass."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _read(db: Path, pragma: str | None) -> tuple[list[str], set[str], int, tuple | None]:
    con = connect_ro(db)
    try:
        problems = [r[0] for r in con.execute(f"PRAGMA {pragma}").fetchall() if r[0] != "ok"] if pragma else []
        tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        runs = con.execute("SELECT count(*) FROM runs").fetchone()[0] if "runs" in tables else 0
        revision = (con.execute("SELECT version_num FROM alembic_version").fetchone()
                    if "alembic_version" in tables else None)
    finally:
        con.close()
    return problems, tables, runs, revision


def check_db(db: Path, full: bool = False) -> Health:
    """The state of ``db`` (which exists), read-only: header, ``quick_check`` (``integrity_check`` with
    ``full``; neither above ``QUICK_CHECK_MAX_BYTES`` unless ``full``), then MLflow's tables and schema
    revision."""
    size = db.stat().st_size
    if size == 0:
        return Health(HALF, "the file is empty", 0)
    head = _header(db)
    if not head.startswith(SQLITE_HEADER):
        return Health(FOREIGN, f"it is not an SQLite database (it starts with {head[:16]!r})")
    if len(head) < 100 or size < 512:
        return Health(DAMAGED, f"it is cut short ({size} bytes, less than one database page)")
    wal = Path(f"{db}-wal")
    if not (wal.is_file() and wal.stat().st_size) and (cut := _cut_short(head, size)):  # a checkpoint in
        return Health(DAMAGED, cut)  # progress writes page 1 first, so with a WAL the file may be shorter for a while
    pragma = "integrity_check(20)" if full else "quick_check(20)" if size <= QUICK_CHECK_MAX_BYTES else None
    for attempt in range(_READ_ATTEMPTS):
        try:
            problems, tables, runs, revision = _read(db, pragma)
            break
        except sqlite3.OperationalError as exc:  # locked or busy while another process writes; or an I/O error
            if attempt == _READ_ATTEMPTS - 1:
                if lock_error(exc):  # a writer held it throughout: that proves nothing; `doctor` checks in full
                    log.warning("could not check %s on opening it: %s; opening it unchecked (`countboard doctor` "
                                "checks it in full)", db, exc)
                    return Health(OK, "", None)
                return Health(DAMAGED, f"SQLite cannot read it ({exc})")
            time.sleep(min(0.05 * 2 ** attempt, 1.0))
        except sqlite3.DatabaseError as exc:  # malformed, not a database: the file itself
            return Health(DAMAGED, f"SQLite cannot read it ({exc})")
    if problems:
        lines = [line.strip() for p in problems for line in p.splitlines()  # one line: a row of the report can
                 if line.strip() and not line.startswith("***")]  # hold several, under a `*** in database` title
        text = "; ".join(lines)
        if len(text) > 300:
            text = text[:300].rsplit("; ", 1)[0] + f"; … ({len(lines)} problems)"
        return Health(DAMAGED, f"SQLite's {pragma.split('(')[0]} reports: {text}")
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


def rebuild(db: Path, make_store: Callable[[Path], None]) -> tuple[Path, Health]:
    """Copy what SQLite can read of the damaged ``db`` into a new file beside it, ``<db>.recovered-<pid>``
    (``tracking.repair.swap_in`` then puts it in place, keeping the original); ``db`` is only read.

    SQLite's own ``.recover`` (the ``sqlite3`` command, when installed and able) is tried first; otherwise, or
    when its result is not a whole MLflow store, each table is copied row by row; when SQLite cannot even read the
    schema (a file cut short loses the pages of the tables created last), the b-tree pages are read directly
    into a new store of MLflow's schema (``_recover_pages``). Returns the new file and its state.

    Args:
        db: The damaged ``mlflow.db``.
        make_store: Builds an empty store of MLflow's schema at the path it is given (``local_store``).

    Raises:
        TrackingStoreError: Nothing usable could be recovered (nothing was changed).
    """
    from countboard.tracking import failpoints

    out = db.with_name(f"{db.name}.recovered-{os.getpid()}")
    attempts = (_recover_cli, _recover_rows, functools.partial(_recover_pages, make_store=make_store))
    for attempt in attempts:
        out.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            attempt(db, out)
            failpoints.hit("repair_build")
            health = check_db(out, full=True) if out.is_file() else Health(DAMAGED, "nothing recovered")
            if health.kind == OK:
                break
    else:
        for suffix in ("", *SIDECARS):
            Path(f"{out}{suffix}").unlink(missing_ok=True)
        raise TrackingStoreError(f"could not recover {db}: SQLite cannot read its MLflow tables; restore it from a "
                                 "backup (nothing was changed)")
    con = sqlite3.connect(out)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()
    return out, health


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


# ---- reading the b-tree pages of a damaged file directly (the SQLite file format, sqlite.org/fileformat.html)

def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = 0
    for k in range(9):
        byte = buf[i + k]
        if k == 8:
            return (value << 8) | byte, i + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, i + k + 1
    raise ValueError("bad varint")


def _record(payload: bytes) -> list:
    """The values of one record (header of serial types, then the values)."""
    import struct

    size, i = _varint(payload, 0)
    types = []
    while i < size:
        t, i = _varint(payload, i)
        types.append(t)
    values, j = [], size
    widths = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}
    for t in types:
        if t == 0:
            values.append(None)
        elif t in widths:
            n = widths[t]
            values.append(int.from_bytes(payload[j:j + n], "big", signed=True))
            j += n
        elif t == 7:
            values.append(struct.unpack(">d", payload[j:j + 8])[0])
            j += 8
        elif t in (8, 9):
            values.append(t - 8)
        elif t >= 12:
            n = (t - 12) // 2
            chunk = payload[j:j + n]
            if len(chunk) < n:
                raise ValueError("record cut short")
            values.append(chunk.decode("utf-8", "replace") if t % 2 else bytes(chunk))
            j += n
        else:
            raise ValueError(f"bad serial type {t}")
    return values


class _Pages:
    """The pages of a (possibly damaged) database file, and the rows of its table b-trees."""

    def __init__(self, data: bytes):
        self.data = data
        size = int.from_bytes(data[16:18], "big") if data.startswith(SQLITE_HEADER) else 4096
        self.size = 65536 if size == 1 else (size if size >= 512 and size & (size - 1) == 0 else 4096)
        self.usable = self.size - (data[20] if len(data) > 20 and data.startswith(SQLITE_HEADER) else 0)

    def page(self, n: int) -> bytes | None:
        start = (n - 1) * self.size
        return self.data[start:start + self.size] if n >= 1 and start + self.size <= len(self.data) else None

    def _payload(self, page: bytes, i: int, total: int) -> bytes:
        u = self.usable
        x, m = u - 35, ((u - 12) * 32 // 255) - 23
        local = total if total <= x else (m + (total - m) % (u - 4) if m + (total - m) % (u - 4) <= x else m)
        out = bytearray(page[i:i + local])
        nxt = int.from_bytes(page[i + local:i + local + 4], "big") if local < total else 0
        seen = set()
        while len(out) < total and nxt and nxt not in seen:
            seen.add(nxt)
            over = self.page(nxt)
            if over is None:
                raise ValueError("overflow page missing")
            out += over[4:4 + min(u - 4, total - len(out))]
            nxt = int.from_bytes(over[:4], "big")
        if len(out) < total:
            raise ValueError("payload cut short")
        return bytes(out)

    def rows(self, root: int):
        """``(rowid, values)`` of every readable row of the table b-tree at ``root``; unreadable pages and cells
        are skipped."""
        pending, seen = [root], set()
        while pending:
            n = pending.pop()
            if n in seen:
                continue
            seen.add(n)
            page = self.page(n)
            if page is None:
                continue
            h = 100 if n == 1 else 0
            kind, cells = page[h], int.from_bytes(page[h + 3:h + 5], "big")
            if kind == 5:  # interior: children, then the right-most one
                for c in range(cells):
                    ptr = int.from_bytes(page[h + 12 + 2 * c:h + 14 + 2 * c], "big")
                    pending.append(int.from_bytes(page[ptr:ptr + 4], "big"))
                pending.append(int.from_bytes(page[h + 8:h + 12], "big"))
            elif kind == 13:
                for c in range(cells):
                    try:
                        ptr = int.from_bytes(page[h + 8 + 2 * c:h + 10 + 2 * c], "big")
                        total, i = _varint(page, ptr)
                        rowid, i = _varint(page, i)
                        yield rowid, _record(self._payload(page, i, total))
                    except (ValueError, IndexError):
                        continue


def _recover_pages(db: Path, out: Path, make_store: Callable[[Path], None]) -> None:
    """A new MLflow store at ``out`` (``make_store`` builds its schema) holding every row of ``db``'s tables whose
    b-tree pages can be read."""
    pages = _Pages(_read_bytes(db, db.stat().st_size))
    roots: dict[str, tuple[int, int]] = {}  # table -> (schema rowid, root page): the latest entry wins
    for rowid, values in pages.rows(1):
        table = len(values) == 5 and values[0] == "table" and isinstance(values[3], int) and values[3] > 0
        if table and rowid >= roots.get(values[1], (-1, 0))[0]:
            roots[values[1]] = (rowid, values[3])
    if not roots:
        raise ValueError("no table of the schema could be read")
    make_store(out)
    dst = sqlite3.connect(out)
    try:
        for table in [t for (t,) in dst.execute("SELECT name FROM sqlite_master WHERE type='table'")]:
            if table not in roots or table.startswith("sqlite_"):
                continue
            info = dst.execute(f'PRAGMA table_info("{table}")').fetchall()
            names = [c[1] for c in info]
            pk = [c[1] for c in info if c[5]]
            alias = names.index(pk[0]) if len(pk) == 1 and info[names.index(pk[0])][2].upper() == "INTEGER" else None
            for rowid, values in pages.rows(roots[table][1]):
                values = list(values[:len(names)])
                if alias is not None and alias < len(values) and values[alias] is None:
                    values[alias] = rowid
                cols = ", ".join(f'"{c}"' for c in names[:len(values)])
                with contextlib.suppress(sqlite3.DatabaseError):
                    dst.execute(f'INSERT OR REPLACE INTO "{table}" ({cols}) VALUES ({", ".join("?" * len(values))})',
                                values)
        dst.commit()
    finally:
        dst.close()
