"""The store address: what the user gave (``--store``, an environment variable, a config value) turned, once,
into the folder, the tracking URI, the artifact root and the default index file.

Every command, the sweep, the index and the leaderboard find their store here, so a path with a space or a
percent sign means the same folder everywhere. The forms accepted:

- a folder (``mlruns``, ``~/runs``, ``/data/my store``): the embedded store ``<folder>/mlflow.db`` with its
  artifacts in ``<folder>/artifacts``; a path ending in ``.db`` names the SQLite file itself;
- ``sqlite:///<path>`` (percent-quoted or not: SQLAlchemy unquotes the path, so this module does too);
- ``file:<path>`` / ``file:///<path>``: MLflow's file store in that folder;
- any other URI (``http(s)://host:port``, ``postgresql://…``): a remote store, with no folder of ours;
- nothing: ``$COUNTBOARD_STORE``, else ``$MLFLOW_TRACKING_URI``, else ``./mlruns``.

A local store's URI is written one way (absolute), whichever form named it, so the index, which keeps the URI,
knows it again.

Nothing here imports MLflow or touches the store; ``countboard.tracking.store.open_store`` opens the address.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

STORE_ENV = "COUNTBOARD_STORE"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
INDEX_DB_ENV = "COUNTBOARD_INDEX_DB"
DEFAULT_STORE = "mlruns"
STORE_DB_NAME = "mlflow.db"
ARTIFACTS_DIR = "artifacts"
INDEX_NAME = "index.duckdb"
_SQLITE = "sqlite:///"


@dataclass(frozen=True)
class StoreAddress:
    """Where one store is.

    Attributes:
        uri: The tracking URI MLflow is given.
        folder: The store's folder on this machine (None for a remote store).
        db: The SQLite file of an embedded store (None otherwise).
        artifact_root: Where new experiments keep their artifacts (``<folder>/artifacts`` for an embedded store;
            None lets the server or the file store decide).
        given: What the address was made from (for messages).
    """

    uri: str
    folder: Path | None
    db: Path | None
    artifact_root: str | None
    given: str

    @property
    def is_local(self) -> bool:
        return self.folder is not None

    @property
    def is_embedded(self) -> bool:
        """A SQLite store in the standard layout (``<folder>/mlflow.db``), which ``local_store`` creates."""
        return self.db is not None and self.db.name == STORE_DB_NAME

    @property
    def http_url(self) -> str | None:
        """The server's URL (no trailing slash) when the store is an http(s) MLflow server, which serves its own UI."""
        return self.uri.rstrip("/") if urlparse(self.uri).scheme in ("http", "https") else None

    @property
    def read_only(self) -> bool:
        """The store's folder (or its database file) exists and this process may not write to it."""
        targets = [p for p in (self.folder, self.db) if p is not None and p.exists()]
        return any(not os.access(p, os.W_OK) for p in targets)

    @property
    def client_uri(self) -> str:
        """The URI MLflow is given. A read-only embedded store is opened ``immutable``: SQLite then takes no lock
        and needs no ``-shm`` file, which a read-only folder could not hold (``tracking.integrity.connect_ro``)."""
        if self.db is not None and self.read_only:
            return f"sqlite:///file:{quote(str(self.db), safe='/')}?immutable=1&uri=true"
        return self.uri

    def cache_dir(self) -> Path:
        """The folder of a store's index and artifact cache: a writable local store's own folder, else
        ``$XDG_CACHE_HOME/countboard/<host or folder name>-<hash>`` (``~/.cache`` without it), one per URI: a
        remote or read-only store has no folder we may write to.

        Example:
            >>> parse("http://10.0.0.5:5000").cache_dir().name.startswith("10.0.0.5_5000-")
            True
        """
        if self.folder is not None and not self.read_only:
            return self.folder
        parsed = urlparse(self.uri)
        name = self.folder.name if self.folder is not None else (parsed.hostname or parsed.scheme or "store")
        host = "".join(c if c.isalnum() or c in ".-" else "_" for c in name)
        if parsed.port:
            host += f"_{parsed.port}"
        digest = hashlib.sha256(self.uri.encode()).hexdigest()[:12]
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
        return (base / "countboard" / f"{host}-{digest}").resolve()

    def index_path(self, env: Mapping[str, str] | None = None) -> Path:
        """``$COUNTBOARD_INDEX_DB``, else ``index.duckdb`` beside a writable local store, else in the store's
        cache folder: a remote or read-only store has no folder of ours, and the working directory is an
        accident."""
        env = os.environ if env is None else env
        if env.get(INDEX_DB_ENV):
            return Path(env[INDEX_DB_ENV]).expanduser().resolve()
        return self.cache_dir() / INDEX_NAME


def sqlite_uri(db: str | os.PathLike) -> str:
    """The tracking URI of the SQLite file ``db`` (absolute). Only ``%`` and ``?`` are quoted: SQLAlchemy unquotes
    the path and ends it at ``?``; everything else (spaces included) stays readable.

    Example:
        >>> sqlite_uri("/tmp/my store/mlflow.db"), sqlite_uri("/tmp/100%/mlflow.db")
        ('sqlite:////tmp/my store/mlflow.db', 'sqlite:////tmp/100%25/mlflow.db')
    """
    path = str(Path(db).expanduser().resolve())
    return _SQLITE + path.replace("%", "%25").replace("?", "%3F")


def _is_uri(value: str) -> bool:
    return "://" in value or value.startswith("file:")


def _local(db: Path, given: str, query: str = "") -> StoreAddress:
    folder = db.parent
    uri = sqlite_uri(db) + (f"?{query}" if query else "")
    return StoreAddress(uri, folder, db, (folder / ARTIFACTS_DIR).as_uri(), given)


def parse(value: str | os.PathLike) -> StoreAddress:
    """The address of ``value``: a folder, a ``.db`` file or a tracking URI (see the module docstring).

    Example:
        >>> a = parse("/tmp/my store")
        >>> a.uri, a.folder, a.artifact_root
        ('sqlite:////tmp/my store/mlflow.db', PosixPath('/tmp/my store'), 'file:///tmp/my%20store/artifacts')
        >>> parse("sqlite:////tmp/my%20store/mlflow.db").folder == a.folder
        True
        >>> parse("http://h:5000").folder is None
        True
    """
    given = str(value)
    if not given.strip():
        raise ValueError("an empty store address")
    if not _is_uri(given):
        path = Path(given).expanduser().resolve()
        return _local(path if path.suffix == ".db" else path / STORE_DB_NAME, given)
    parsed = urlparse(given)
    if parsed.scheme == "sqlite":
        rest, _, query = given[len("sqlite://"):].partition("?")  # sqlite:///rel.db relative, sqlite:////abs.db not
        if rest.startswith("/file:"):  # SQLite's URI-filename form (``client_uri``): the same file
            rest, query = "/" + rest[len("/file:"):].lstrip("/"), ""
        if rest in ("", "/", "/:memory:"):
            return StoreAddress(given, None, None, None, given)
        return _local(Path(unquote(rest[1:])).expanduser().resolve(), given, query)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            return StoreAddress(given, None, None, None, given)
        from urllib.request import url2pathname  # http.client and email with it: only for a file: URI

        folder = Path(url2pathname(parsed.path)).expanduser().resolve()
        return StoreAddress(folder.as_uri(), folder, None, None, given)
    return StoreAddress(given, None, None, None, given)


def resolve(arg: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> StoreAddress:
    """The store a command works on: ``arg`` (``--store``), else ``$COUNTBOARD_STORE``, else
    ``$MLFLOW_TRACKING_URI``, else ``./mlruns``.

    Example:
        >>> resolve("/tmp/store", env={}).uri
        'sqlite:////tmp/store/mlflow.db'
    """
    env = os.environ if env is None else env
    return parse(arg or env.get(STORE_ENV) or env.get(TRACKING_URI_ENV) or DEFAULT_STORE)


def local_folder(uri: str | None) -> Path | None:
    """The folder of the store at ``uri`` (as kept in an index), None for a remote store or no URI."""
    return parse(uri).folder if uri else None
