"""Swapping a recovered database in for a damaged one so that a kill at any moment leaves a store commands know.

``doctor --fix`` builds the recovered database beside the damaged one (``mlflow.db.recovered-<pid>``), then writes
an intent file (``mlflow.db.repair``: which file replaces ``mlflow.db`` and the name the damaged one is kept
under) and only then changes ``mlflow.db``: the damaged file and its ``-wal``/``-shm`` are linked to their kept
names, the sidecars removed, and the recovered file renamed over ``mlflow.db`` in one step. So ``mlflow.db`` is at
every moment either the damaged database or the recovered one, and while the intent file is there the next
writer (a sweep, ``doctor --fix``) completes the same steps (``complete``); a reader refuses the store in one
line until then. A recovered file without an intent file is an unfinished build, named by ``doctor`` and deleted
by ``--fix``. A folder that holds what a database leaves behind (``-wal``, a kept ``.damaged-…``, a
``.recovered-…``) but no ``mlflow.db`` is a store that lost its database, never a place for a new one
(``missing_database``); ``restore`` puts the newest kept database back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

from countboard.errors import TrackingStoreError
from countboard.processes import pid_alive
from countboard.tracking import failpoints
from countboard.tracking.integrity import SIDECARS, check_db

INTENT_SUFFIX = ".repair"
RECOVERED = "recovered"
KEPT = "damaged"


def intent_path(db: Path) -> Path:
    return db.with_name(db.name + INTENT_SUFFIX)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep(src: Path, dst: Path) -> None:
    """``dst`` becomes a second name of ``src`` (a copy where the file system has no hard links)."""
    try:
        os.link(src, dst)
    except OSError:
        part = dst.with_name(dst.name + ".part")
        shutil.copy2(src, part)
        os.replace(part, dst)


def swap_in(db: Path, recovered: Path, aside: Path) -> None:
    """Replace ``db`` by the complete ``recovered`` file, keeping the old one (and its sidecars) as ``aside``; the
    caller holds the store's lock. Each step is one a kill may stop at (``failpoints``): see the module doc."""
    _fsync(recovered)
    intent = intent_path(db)
    part = intent.with_name(intent.name + f".part-{os.getpid()}")
    part.write_text(json.dumps({"recovered": recovered.name, "kept": aside.name}))
    _fsync(part)
    os.replace(part, intent)
    _fsync_dir(db.parent)
    failpoints.hit("repair_intent")
    complete(db)


def pending(db: Path) -> tuple[Path, Path] | None:
    """``(recovered, kept)`` of a repair whose intent file is there and whose recovered file is not yet swapped
    in; None when there is none (an intent file left after the swap is only stale)."""
    intent = intent_path(db)
    try:
        doc = json.loads(intent.read_text())
        recovered, kept = db.with_name(Path(doc["recovered"]).name), db.with_name(Path(doc["kept"]).name)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (recovered, kept) if recovered.is_file() else None


def complete(db: Path) -> bool:
    """Finish the repair the intent file beside ``db`` describes (idempotent; the caller holds the store's lock);
    False when there was none to finish."""
    intent = intent_path(db)
    if not intent.exists():
        return False
    steps = pending(db)
    if steps is not None:
        recovered, kept = steps
        for suffix in ("", *SIDECARS):  # the damaged database keeps its WAL under the kept name
            src, dst = Path(f"{db}{suffix}"), Path(f"{kept}{suffix}")
            if src.exists() and not dst.exists():
                _keep(src, dst)
        failpoints.hit("repair_kept")
        for suffix in SIDECARS:  # the old WAL must never be applied to the recovered file
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        failpoints.hit("repair_sidecars")
        os.replace(recovered, db)
        _fsync_dir(db.parent)
        failpoints.hit("repair_swapped")
    intent.unlink(missing_ok=True)
    return True


def _pid_of(path: Path) -> int | None:
    tail = path.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


def stopped_builds(db: Path) -> list[Path]:
    """Recovered files (with their sidecars) left by a repair that was stopped before its intent file was
    written: no live process of this host is building them and no intent names them."""
    steps = pending(db)
    named = steps[0] if steps else None
    out = []
    for path in sorted(db.parent.glob(f"{db.name}.{RECOVERED}-*")):
        if path.name.endswith((*SIDECARS, ".part")) or path == named or pid_alive(_pid_of(path)):
            continue
        out.append(path)
    return out


def delete_build(path: Path) -> None:
    for suffix in ("", *SIDECARS):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def traces(db: Path) -> list[Path]:
    """What a database leaves in its folder (sidecars, kept and recovered copies, an intent file)."""
    names = [Path(f"{db}{s}") for s in SIDECARS] + [intent_path(db)]
    names += sorted(db.parent.glob(f"{db.name}.{KEPT}-*")) + sorted(db.parent.glob(f"{db.name}.{RECOVERED}-*"))
    return [p for p in names if p.exists()]


def missing_database(db: Path) -> TrackingStoreError | None:
    """The error for a folder with no ``db`` but the traces of one (never a place for a new store), else None."""
    if db.is_file():
        return None
    seen = traces(db)
    if not seen:
        return None
    store = db.parent
    shown = ", ".join(p.name for p in seen[:4]) + (f" and {len(seen) - 4} more" if len(seen) > 4 else "")
    return TrackingStoreError(
        f"the store {store} has no {db.name} but holds what one leaves ({shown}): its database was moved or lost "
        f"(a repair that was stopped?), so no new store is made there; run `countboard doctor --store {store} "
        "--fix` to put the newest kept database back")


def restorable(db: Path) -> Path | None:
    """The database to put back at a missing ``db``: a complete recovered file if there is one, else the newest
    kept damaged one (repaired again afterwards); None when there is neither."""
    for path in sorted(db.parent.glob(f"{db.name}.{RECOVERED}-*"), key=lambda p: p.stat().st_mtime, reverse=True):
        if not path.name.endswith((*SIDECARS, ".part")) and check_db(path, full=True).ok:
            return path
    kept = [p for p in db.parent.glob(f"{db.name}.{KEPT}-*") if not p.name.endswith((*SIDECARS, ".part"))]
    return max(kept, key=lambda p: p.stat().st_mtime) if kept else None


def restore(db: Path) -> Path:
    """Put :func:`restorable` back as ``db`` (a recovered file is moved; a kept damaged one is linked, so it stays
    kept, with its WAL); the caller holds the store's lock. Returns what was put back.

    Raises:
        TrackingStoreError: There is nothing to put back.
    """
    source = restorable(db)
    if source is None:
        raise TrackingStoreError(f"no database to put back at {db}: restore it from a backup")
    if source.name.startswith(f"{db.name}.{RECOVERED}-"):
        con = sqlite3.connect(source)
        try:  # everything in its main file: its sidecars stay behind
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            con.close()
        for suffix in SIDECARS:
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        os.replace(source, db)
        delete_build(source)
    else:
        for suffix in SIDECARS:
            Path(f"{db}{suffix}").unlink(missing_ok=True)
            if Path(f"{source}{suffix}").exists():
                _keep(Path(f"{source}{suffix}"), Path(f"{db}{suffix}"))
        try:
            os.link(source, db)  # one step: there is no ``db`` to replace
        except OSError:
            part = db.with_name(db.name + f".{RECOVERED}-{os.getpid()}")  # a stopped copy is a stopped build
            shutil.copy2(source, part)
            os.replace(part, db)
    _fsync_dir(db.parent)
    intent_path(db).unlink(missing_ok=True)
    return source
