"""A local store is self-contained: its artifact locations are found relative to the store folder.

MLflow records artifact locations as absolute ``file://`` URIs (``experiments.artifact_location``, and each run's
``runs.artifact_uri`` below it), and resolves relative ones against the working directory, so they cannot simply
be stored relative. A store that was copied, moved, renamed or mounted elsewhere therefore still names its old
folder: a sweep into a copy would write into the original. Two rules keep every store on its own folder:

- **Resolution** (every read and write of artifacts, read-only stores included): a recorded location that lies
  outside the current store, has the store layout ``<old folder>/artifacts/<experiment>[/<run>/artifacts]`` and
  whose relative part exists inside the current store (or whose recorded folder no longer exists) is read as that
  relative part inside the current store. Locations that exist elsewhere and have no counterpart here (artifacts
  kept outside the store on purpose, e.g. by ``mlflow server --default-artifact-root``) are used as recorded.
- **Rewrite on open** (commands that write to a writable store): the same rule applied to the database itself, in
  one transaction, so MLflow's own tools (``mlflow ui``, ``MlflowClient``) see the current folder too. A store
  created by an older version, or copied from another machine, is migrated this way without moving a file.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path
from urllib.parse import unquote, urlparse

from countboard.tracking import address

log = logging.getLogger("countboard")

ARTIFACTS_DIR = address.ARTIFACTS_DIR
#: Folders below ``artifacts/``: an experiment's location is ``<exp>``, a run's ``<exp>/<run_id>/artifacts``.
EXPERIMENT_DEPTH, RUN_DEPTH = 1, 3


def _local_path(location: str) -> Path | None:
    parsed = urlparse(location)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and location.startswith("/"):
        return Path(location)
    return None


def store_relative(location: str, folder: str | Path, depth: int = RUN_DEPTH) -> str:
    """``location`` read inside the store at ``folder`` (see the module docstring); else ``location`` itself.

    Args:
        location: A recorded artifact location (``file://`` URI or absolute path).
        folder: The store folder as given now.
        depth: Folders of ``location`` below ``artifacts/`` (``RUN_DEPTH`` for a run, ``EXPERIMENT_DEPTH`` for an
            experiment).

    Example:
        >>> store_relative("file:///gone/store/artifacts/exp/abc/artifacts", "/new/copy")
        'file:///new/copy/artifacts/exp/abc/artifacts'
        >>> store_relative("s3://bucket/1/abc/artifacts", "/new/copy")
        's3://bucket/1/abc/artifacts'
    """
    if location.startswith((f"{folder}/", f"file://{folder}/")):  # already inside (the common case, no parsing)
        return location
    path = _local_path(location)
    if path is None:
        return location
    folder = Path(folder)
    if path.is_relative_to(folder) or len(path.parts) < depth + 2 or path.parts[-depth - 1] != ARTIFACTS_DIR:
        return location
    here = folder.joinpath(ARTIFACTS_DIR, *path.parts[-depth:])
    if not here.exists() and _exists(path):
        return location  # kept outside the store on purpose, and nothing of it here
    return here.as_uri() if location.startswith("file:") else str(here)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a dead mount, a folder we may not enter
        return False


def store_folder(store_uri: str | None) -> Path | None:
    """The folder of the embedded SQLite store at ``store_uri`` (``<folder>/mlflow.db``), None for any other."""
    if not store_uri:
        return None
    where = address.parse(store_uri)
    return where.folder if where.is_embedded else None


def resolve_run_uri(artifact_uri: str, store_uri: str | None) -> str:
    """A run's recorded ``artifact_uri`` as it is found in the store at ``store_uri`` (unchanged for remote ones)."""
    folder = store_folder(store_uri)
    return artifact_uri if folder is None or not artifact_uri else store_relative(artifact_uri, folder, RUN_DEPTH)


def stale_locations(db: Path, folder: Path | None = None) -> dict[str, tuple[str, str]]:
    """``{experiment_id: (recorded, current)}`` for each experiment whose location names another folder than the
    store's (``folder``, by default the database's own)."""
    from countboard.tracking.integrity import connect_ro

    con = connect_ro(db)
    try:
        rows = con.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
    finally:
        con.close()
    out = {}
    for exp_id, location in rows:
        if location and (moved := store_relative(location, folder or db.parent, EXPERIMENT_DEPTH)) != location:
            out[str(exp_id)] = (location, moved)
    return out


def rewrite_locations(db: Path, folder: Path | None = None) -> int:
    """Point every experiment (and its runs) that names another folder at the store's folder (``folder``, by
    default the database's own); returns how many experiments were rewritten. One transaction: a kill leaves the
    old locations, which still resolve."""
    from countboard.tracking.integrity import lock_error

    try:
        stale = stale_locations(db, folder)
    except sqlite3.OperationalError as exc:  # a writer holds the store: the locations are read in place, so this
        if not lock_error(exc):  # can wait for the next open
            raise
        log.debug("artifact locations of %s not checked now: %s", db, exc)
        return 0
    if not stale:
        return 0
    con = sqlite3.connect(db, timeout=30, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        for exp_id, (old, new) in stale.items():
            con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ? AND "
                        "artifact_location = ?", (new, int(exp_id), old))
            con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE experiment_id = ? AND "
                        "substr(artifact_uri, 1, ?) = ?", (new, len(old) + 1, int(exp_id), len(old) + 1, old + "/"))
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            con.execute("ROLLBACK")
        raise
    finally:
        con.close()
    first_old, first_new = next(iter(stale.values()))
    log.info("store %s was copied or moved: artifact locations of %d experiment(s) in %s now point inside it "
             "(e.g. %s -> %s)", folder or db.parent, len(stale), db.name, first_old, first_new)
    return len(stale)


def relocated_copy(db: Path, dest: Path) -> bool:
    """For a store that cannot be rewritten (read-only) and names another folder: a copy of ``db`` at ``dest``
    whose locations point inside the store's folder, for tools that read the database's locations as they are
    (the MLflow UI lists a run's artifacts at its recorded ``artifact_uri``). ``db`` is read, never written;
    ``dest`` is replaced whole. Returns False (and writes nothing) when no location names another folder.
    """
    import os

    from countboard.tracking.integrity import connect_ro

    if not stale_locations(db):
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f"{dest.name}.part-{os.getpid()}")
    part.unlink(missing_ok=True)
    src, out = connect_ro(db), sqlite3.connect(part)
    try:
        src.backup(out)
    finally:
        src.close()
        out.close()
    rewrite_locations(part, db.parent)
    for suffix in ("-wal", "-shm"):
        Path(f"{dest}{suffix}").unlink(missing_ok=True)
    os.replace(part, dest)
    return True
