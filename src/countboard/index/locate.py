"""Where the store and its index are, from what the user typed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

DB_NAME = "index.duckdb"
DB_ENV = "COUNTBOARD_INDEX_DB"


def resolve_store_uri(store: str | None = None) -> str:
    """A tracking URI from ``--store``: a URI as given, a store directory or ``.db`` file as SQLite.

    Without ``store``: ``$COUNTBOARD_STORE``, ``$MLFLOW_TRACKING_URI``, else ``./mlruns/mlflow.db`` (the same
    order as every command, ``countboard.tracking.store.store_uri``).

    Example:
        >>> resolve_store_uri("/tmp/store")
        'sqlite:////tmp/store/mlflow.db'
    """
    from countboard.tracking.store import store_uri

    return store_uri(store)


def local_store_dir(store_uri: str) -> Path | None:
    """The directory of a SQLite or file store, None for a remote one."""
    parsed = urlparse(store_uri)
    if parsed.scheme == "sqlite":
        return Path(unquote(store_uri[len("sqlite:///"):])).parent
    if parsed.scheme in ("file", ""):
        return Path(unquote(parsed.path))
    return None


def remote_cache_dir(store_uri: str) -> Path:
    """The folder of a remote store's index and artifact cache: ``$XDG_CACHE_HOME/countboard/<host>-<hash>``
    (``~/.cache`` without it), one per store URI.

    Example:
        >>> remote_cache_dir("http://10.0.0.5:5000").name.startswith("10.0.0.5_5000-")
        True
    """
    parsed = urlparse(store_uri)
    host = "".join(c if c.isalnum() or c in ".-" else "_" for c in (parsed.hostname or parsed.scheme or "store"))
    if parsed.port:
        host += f"_{parsed.port}"
    digest = hashlib.sha256(store_uri.encode()).hexdigest()[:12]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return (base / "countboard" / f"{host}-{digest}").resolve()


def default_db_path(store_uri: str) -> Path:
    """``$COUNTBOARD_INDEX_DB``, else ``index.duckdb`` beside a local store, else in the store's cache folder
    (``remote_cache_dir``): a remote store has no folder of ours, and the working directory is an accident."""
    if os.environ.get(DB_ENV):
        return Path(os.environ[DB_ENV]).expanduser().resolve()
    store_dir = local_store_dir(store_uri)
    return (store_dir if store_dir is not None else remote_cache_dir(store_uri)) / DB_NAME
