"""Errors with a message that says what was wrong, where, and what to do."""

from __future__ import annotations


class CountboardError(Exception):
    """Base class: the message is meant for the user as it stands."""


class ConfigError(CountboardError):
    """A configuration value is wrong or refers to something that does not exist."""


class DataNotFoundError(CountboardError):
    """Input data is missing at the configured path."""

    def __init__(self, path, config_key: str, how_to_get: str):
        self.path = path
        self.config_key = config_key
        super().__init__(f"data not found at {path} (config key `{config_key}`). {how_to_get}")


class TrackingStoreError(CountboardError):
    """The MLflow tracking store cannot be reached or used."""


class WriteError(CountboardError):
    """A file system refused a write (full, over quota, read-only, failing): ``write_error`` says which and what to
    do."""


DEBUG_ENV = "COUNTBOARD_DEBUG"


def debug_enabled() -> bool:
    """True when ``COUNTBOARD_DEBUG`` asks for tracebacks (``countboard --debug`` sets it)."""
    import os

    return os.environ.get(DEBUG_ENV, "").lower() not in ("", "0", "false", "no")


def user_message(exc: BaseException) -> str | None:
    """One line for an error the user can fix (ours, or an OS, Arrow or zip error, with its file); None for a bug.

    Example:
        >>> user_message(FileNotFoundError(2, "No such file or directory", "/x/a.parquet"))
        'No such file or directory: /x/a.parquet (FileNotFoundError)'
    """
    import zipfile

    if isinstance(exc, CountboardError):
        return str(exc)
    written = write_error(exc)
    if written is not None:
        return written
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or exc}: {exc.filename} ({type(exc).__name__})"
    if isinstance(exc, zipfile.BadZipFile):
        return f"not a readable zip archive: {exc}"
    if type(exc).__module__.startswith("pyarrow"):
        return f"Parquet/Arrow error: {exc}"
    return None


#: Write errors of a file system (not of one file), and what each says about it. EFBIG is the process's file size
#: limit (``ulimit -f``), which a full disk and a limit share the remedy of: room for the file.
_WRITE_ERRNOS = {"ENOSPC": "is full", "EDQUOT": "has no quota left for you", "EROFS": "is read-only",
                 "EIO": "reports an I/O error (a failing disk or a lost network mount)",
                 "EFBIG": "refused a file over this process's file size limit (ulimit -f)"}
#: The same errors as SQLite words them (it keeps no errno): the database's file system.
_SQLITE_WRITE = {"database or disk is full": "ENOSPC", "attempt to write a readonly database": "EROFS",
                 "disk i/o error": "EIO"}
#: And as libraries that keep only the text of ``strerror`` word them (DuckDB's ``IOException``, Arrow's).
_STRERROR = {"no space left on device": "ENOSPC", "disk quota exceeded": "EDQUOT", "read-only file system": "EROFS",
             "file too large": "EFBIG"}
_REMEDY = {"ENOSPC": "free space there", "EDQUOT": "free space there or ask for a larger quota",
           "EROFS": "mount it writable", "EIO": "check the disk (dmesg) or the mount",
           "EFBIG": "raise the limit (ulimit -f unlimited)"}


#: Less free space than this on the store's file system, and an I/O error of SQLite is taken for a full disk.
_NEARLY_FULL = 1 << 20


def exception_chain(exc: BaseException):
    """``exc`` and every exception it was raised from or during, each once (and a wrapper's ``orig``)."""
    seen, pending = set(), [exc]
    while pending:
        e = pending.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        pending += [e.__cause__, e.__context__, *(getattr(e, "orig", None),)]


def write_failure(exc: BaseException) -> tuple[str, str | None] | None:
    """``(errno name, path or None)`` when ``exc`` is, or was caused by, a file system refusing a write (an
    ``OSError`` with ENOSPC, EDQUOT, EROFS, EIO or EFBIG, or SQLite's words for them, also inside MLflow's and
    SQLAlchemy's wrappers); None otherwise. The path is the file being written (``shutil`` names its source first
    and the destination second), None when only SQLite knows it.

    Example:
        >>> write_failure(OSError(28, "No space left on device", "/s/a.png"))
        ('ENOSPC', '/s/a.png')
    """
    import errno
    import re

    for e in exception_chain(exc):
        if isinstance(e, OSError) and errno.errorcode.get(e.errno or -1) in _WRITE_ERRNOS:
            return errno.errorcode[e.errno], e.filename2 or e.filename
        text = str(e).lower()
        for words, name in _SQLITE_WRITE.items():
            if words in text:
                return name, None
        for words, name in _STRERROR.items():
            if words in text and not isinstance(e, OSError):  # an OSError with another errno says more
                quoted = re.search(r"[\"'](/[^\"']+)[\"']", str(e))
                return name, quoted.group(1) if quoted else None
    return None


def _mount_point(path) -> str:
    import os

    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def _refuses(name: str, folder) -> bool:
    """Whether the file system of ``folder`` shows the error ``name`` (nearly full, or mounted read-only)."""
    import os
    import shutil

    try:
        if name == "EROFS":
            return bool(os.statvfs(_mount_point(folder)).f_flag & os.ST_RDONLY)
        return shutil.disk_usage(_mount_point(folder)).free < _NEARLY_FULL
    except OSError:
        return False


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} TB"


def write_error(exc: BaseException, store=None) -> str | None:
    """One line for a write the file system refused, naming that file system (the store's, when the write was
    into ``store`` or only SQLite knows where; the temporary files' when it was there) and what to do; None when
    ``exc`` is no such error.

    Example:
        >>> write_error(OSError(30, "Read-only file system", "/"))[:47]
        'the file system of / (mounted at /) is read-only'
    """
    import shutil
    import tempfile
    from pathlib import Path

    failure = write_failure(exc)
    if failure is None:
        return None
    name, path = failure
    store = Path(store).resolve() if store is not None else None
    temp = Path(tempfile.gettempdir()).resolve()
    target = Path(path).resolve() if path else None
    if target is None and store is not None and _refuses(name, temp) and not _refuses(name, store):
        target = temp  # a writer that does not name its file (Arrow, SQLite's temporary files)
    if (target is not None and target.is_relative_to(temp) and not (store and target.is_relative_to(store))
            and _mount_point(target) == _mount_point(temp)):  # not another file system mounted below it
        where, mount, move = f"temporary files {temp}", _mount_point(temp), "set TMPDIR to a folder that has room"
    elif store is not None and (target is None or target.is_relative_to(store)):
        where, mount = f"the store {store}", _mount_point(store)
        move = "move the store (tracking.store_dir=…, --store or $COUNTBOARD_STORE)"
    elif target is not None:
        where, mount, move = str(target), _mount_point(target), ""
    else:
        return (f"a database write failed: its file system {_WRITE_ERRNOS[name]} (SQLite: {name}); "
                f"{_REMEDY[name]} on the store's file system, then run the same command again")
    try:
        left = shutil.disk_usage(mount).free
    except OSError:
        left = None
    if name == "EIO" and path is None and left is not None and left < _NEARLY_FULL:
        name = "ENOSPC"  # SQLite reports a write that a full disk refused in its WAL as an I/O error
    free = f", {_size(left)} free" if name in ("ENOSPC", "EDQUOT") and left is not None else ""
    todo = _REMEDY[name] + (f", or {move}" if move else "")
    return (f"the file system of {where} (mounted at {mount}{free}) {_WRITE_ERRNOS[name]}: {todo}; then run the "
            "same command again (what was finished is kept)")
