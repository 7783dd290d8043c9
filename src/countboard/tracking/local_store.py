"""Creating the embedded SQLite store atomically, and telling a half-created one from a good one.

MLflow creates its tables and runs its migrations on first connect, in place: a process killed in the middle
leaves a database that MLflow can neither use nor finish (``duplicate column name``), and two processes creating
one store at once collide the same way. Here the schema is built in ``mlflow.db.creating-<pid>`` under an
exclusive file lock and renamed to ``mlflow.db`` when complete, so ``mlflow.db`` is either absent or whole.
A ``mlflow.db`` left half-created by an older version (or by ``mlflow`` itself) is moved aside, with a message
that names it, and created again. The first store built by an MLflow version is kept as a template
(``$XDG_CACHE_HOME/countboard/empty-mlflow-<version>.db``); later stores are copies of it. A damaged or foreign
file is refused, never replaced (``tracking.integrity``). Opening a writable store for writing also points
artifact locations of a copied or moved store at its own folder (``tracking.relocate``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sqlite3
import time
from pathlib import Path

from countboard.errors import TrackingStoreError
from countboard.tracking import failpoints, repair
from countboard.tracking.address import STORE_DB_NAME as DB_NAME
from countboard.tracking.address import STORE_ENV, sqlite_uri
from countboard.tracking.integrity import HALF, Health, check_db, rebuild, refusal, set_aside
from countboard.tracking.relocate import rewrite_locations

log = logging.getLogger("countboard")

LOCK_NAME = ".mlflow.db.lock"
_SIDECARS = ("", "-wal", "-shm", "-journal")


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive ``flock`` on ``path`` (released by the kernel if the holder dies)."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def store_problem(db: Path) -> str | None:
    """Why ``db`` is not a complete MLflow store that may be replaced, or None when it is a good one.

    Raises:
        TrackingStoreError: ``db`` is foreign, damaged or of an older schema: never replaced (one line says why
            and what to do).
    """
    health = check_db(db)
    if health.ok:
        return None
    if health.kind == HALF:
        return health.detail
    raise refusal(db, health)


def _template() -> Path:
    """Where an empty store of this MLflow version is kept: a new store is a copy of it, not a schema build."""
    from importlib.metadata import version

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "countboard" / f"empty-mlflow-{version('mlflow')}.db"


def _from_template(tmp: Path, artifact_root: str) -> bool:
    """Copy the empty store (if there is a complete one) to ``tmp`` and point its Default experiment at
    ``artifact_root``; False when there is none to copy."""
    from countboard.tracking import tags as tg

    template = _template()
    try:
        if not template.is_file() or store_problem(template) is not None:
            return False
        shutil.copyfile(template, tmp)
    except (OSError, TrackingStoreError):
        return False
    now = int(time.time() * 1000)
    con = sqlite3.connect(tmp, timeout=30)
    try:  # the only row that names a folder; MLflow writes it as ``<artifact_root>/0``
        with con:
            con.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
                        "WHERE experiment_id = 0", (f"{artifact_root}/0", now, now))
            # the Default experiment's kind, also from a template kept before stores were given it
            con.execute("INSERT OR IGNORE INTO experiment_tags (key, value, experiment_id) VALUES (?, ?, 0)",
                        (tg.EXPERIMENT_KIND, tg.EXPERIMENT_KIND_ML))
    finally:
        con.close()
    return True


def _save_template(db: Path) -> None:
    """Keep a copy of the store just built (whole, in one file) as the template of the next ones."""
    template = _template()
    part = template.with_name(f"{template.name}.part-{os.getpid()}")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(db, timeout=30)
        try:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file before it is copied
        finally:
            con.close()
        shutil.copyfile(db, part)
        os.replace(part, template)
    except OSError as exc:  # a read-only home: every store is built, as before
        log.debug("no store template at %s: %s", template, exc)
        part.unlink(missing_ok=True)


def _create(tmp: Path, artifact_root: str) -> None:
    """Build an empty store in ``tmp``: a copy of the template when there is one (milliseconds), else MLflow's
    schema build and migrations (2-3 s of CPU), kept as the template."""
    if _from_template(tmp, artifact_root):
        return
    from mlflow.entities import ExperimentTag
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from countboard.tracking import tags as tg

    uri = sqlite_uri(tmp)
    store = SqlAlchemyStore(uri, artifact_root)
    # the Default experiment is a classic ML experiment too, as every experiment a sweep creates
    store.set_experiment_tag(tg.DEFAULT_EXPERIMENT_ID, ExperimentTag(tg.EXPERIMENT_KIND, tg.EXPERIMENT_KIND_ML))
    store.engine.dispose()
    SqlAlchemyStore._engine_map.pop(uri, None)
    con = sqlite3.connect(tmp, timeout=30)
    try:  # write-ahead logging lets parallel jobs read while one writes (the mode persists in the file)
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()
    _save_template(tmp)


def recover_store(db: Path) -> tuple[Path, Health]:
    """Recover a damaged ``<folder>/mlflow.db``: what SQLite can read, built in a new file beside it and swapped in
    by one rename (``tracking.repair``), under the store's lock; the damaged one kept as
    ``mlflow.db.damaged-<time>-<pid>``. Returns that name and the state of the new store."""
    with file_lock(db.parent / LOCK_NAME):
        built, health = rebuild(db, lambda out: _create(out, (db.parent / "artifacts").as_uri()))
        failpoints.hit("repair_built")
        aside = db.with_name(f"{db.name}.{repair.KEPT}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        repair.swap_in(db, built, aside)
    return aside, health


def finish_repair(db: Path) -> bool:
    """Complete a repair of ``db`` that was stopped after its intent file was written (under the store's lock);
    False when there was none."""
    with file_lock(db.parent / LOCK_NAME):
        done = repair.complete(db)
    if done:
        log.warning("completed the repair of %s that was stopped (the damaged database is kept beside it)", db)
    return done


def _move_aside(db: Path, reason: str) -> Path:
    aside = set_aside(db, "broken")
    log.warning("store %s was half-created (%s): moved it to %s and created a new one (delete %s once you "
                "have checked it holds nothing you need)", db, reason, aside.name, aside)
    return aside


def ensure_local_store(store_dir: str | os.PathLike, create: bool = True) -> Path:
    """The complete ``<store_dir>/mlflow.db``, created (or recreated when half-created) under a file lock.

    Args:
        store_dir: The store directory.
        create: False for read-only commands: a missing store is an error instead of a new empty one.

    Raises:
        TrackingStoreError: No store there and ``create`` is off; the file is foreign or damaged (never replaced);
            it is half-created and ``create`` is off; or the store needs ``mlflow db upgrade``.
    """
    root = Path(store_dir).expanduser().resolve()
    db = root / DB_NAME
    if repair.pending(db) is not None:
        if not create or not os.access(root, os.W_OK):
            raise TrackingStoreError(f"a repair of {db} was stopped before the recovered database was put in place; "
                                     f"run `countboard doctor --store {root} --fix` to complete it")
        finish_repair(db)
    if (lost := repair.missing_database(db)) is not None:
        raise lost
    if not create and not db.is_file():
        raise TrackingStoreError(f"no MLflow store at {root} (no {DB_NAME}); check --store / ${STORE_ENV}, "
                                 "or run a sweep first (`countboard-sweep ...` or `make demo`) to create one")
    if db.is_file():
        health = check_db(db)  # header and quick_check: cheap, and read-only
        if health.ok:
            if create and os.access(db, os.W_OK) and os.access(root, os.W_OK):
                rewrite_locations(db)  # a copied or moved store points at its own folder from now on
            return db
        if health.kind != HALF or not create:  # only a writer replaces, and only a half-made store
            raise refusal(db, health)
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / LOCK_NAME):
        for stale in root.glob(f"{DB_NAME}.creating-*"):  # left by a creator that was killed
            stale.unlink(missing_ok=True)
        if db.is_file():
            problem = store_problem(db)
            if problem is None:
                return db
            _move_aside(db, problem)
        elif (lost := repair.missing_database(db)) is not None:  # lost while this process waited for the lock
            raise lost
        tmp = root / f"{DB_NAME}.creating-{os.getpid()}"
        _create(tmp, (root / "artifacts").as_uri())
        os.replace(tmp, db)
        for suffix in _SIDECARS[1:]:
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    return db
