"""Write errors (a full, read-only or failing file system) become one line naming the file system, from any layer."""

from __future__ import annotations

import errno
import logging
import sqlite3

import pytest

from countboard import errors


def _wrapped(inner: BaseException) -> BaseException:
    """``inner`` as MLflow raises it: inside SQLAlchemy's error, inside ``MlflowException`` (both ``from``)."""
    try:
        try:
            try:
                raise inner
            except BaseException as e:
                raise RuntimeError(f"(sqlite3.OperationalError) {e}") from e
        except RuntimeError as e:
            raise ValueError(str(e)) from e
    except ValueError as e:
        return e


@pytest.mark.parametrize(("inner", "name"), [
    (sqlite3.OperationalError("database or disk is full"), "ENOSPC"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "EROFS"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "EDQUOT"),
    (OSError(errno.EFBIG, "File too large"), "EFBIG"),
])
def test_a_write_error_is_found_through_the_wrappers(inner, name):
    assert errors.write_failure(_wrapped(inner)) == (name, None)
    assert errors.write_failure(_wrapped(KeyError("bug"))) is None
    assert errors.write_failure(OSError(errno.ENOENT, "No such file", "/x")) is None  # not a file system's refusal


def test_the_file_named_is_where_the_write_went(tmp_path, monkeypatch):
    """``shutil`` names the source (a temporary figure) first and the destination second: the destination's file
    system is the one named."""
    store = tmp_path / "store"
    temp = tmp_path / "tmp"
    store.mkdir()
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)
    copy = OSError(errno.ENOSPC, "No space left on device")
    copy.filename, copy.filename2 = str(temp / "figures" / "m.png"), str(store / "artifacts" / "m.png")
    line = errors.write_error(copy, store)
    assert line.startswith(f"the file system of the store {store.resolve()} (mounted at ")
    assert " free) is full: free space there, or move the store (tracking.store_dir=" in line
    temp_line = errors.write_error(OSError(errno.ENOSPC, "No space left on device", str(temp / "a.png")), store)
    assert temp_line.startswith(f"the file system of temporary files {temp.resolve()}") and "TMPDIR" in temp_line
    # SQLite names no file: the store's file system; unless only the temporary files' one is full
    assert f"the store {store.resolve()}" in errors.write_error(_wrapped(sqlite3.OperationalError(
        "database or disk is full")), store)
    monkeypatch.setattr(errors, "_refuses", lambda name, folder: folder == temp.resolve())
    assert "temporary files" in errors.write_error(OSError(errno.ENOSPC, "Error writing bytes to file"), store)


def test_sqlite_io_error_on_a_nearly_full_store_is_a_full_disk(tmp_path, monkeypatch):
    io = _wrapped(sqlite3.OperationalError("disk I/O error"))
    assert "reports an I/O error" in errors.write_error(io, tmp_path)
    monkeypatch.setattr("shutil.disk_usage", lambda p: type("U", (), {"free": 4096})())
    line = errors.write_error(io, tmp_path)
    assert "4.0 KB free) is full" in line


def test_user_message_and_read_only():
    line = errors.user_message(OSError(errno.EROFS, "Read-only file system", "/not-a-folder-here/x"))
    assert line.startswith("the file system of /not-a-folder-here/x (mounted at /) is read-only: mount it writable")
    assert errors.user_message(_wrapped(sqlite3.OperationalError("database or disk is full"))).startswith(
        "a database write failed: its file system is full")


def test_mlflow_database_error_reports_are_left_to_the_command(monkeypatch):
    """MLflow logs each database error with its traceback before raising it; without --debug that record is
    dropped (the command says it in one line)."""
    from countboard.tracking.store import _RaisedAnyway

    record = logging.LogRecord("mlflow.store.db.utils", logging.ERROR, __file__, 1,
                               "SQLAlchemy database error. The following exception is caught.\n%s", ("x",), None)
    other = logging.LogRecord("mlflow.store.db.utils", logging.ERROR, __file__, 1, "something else", (), None)
    monkeypatch.delenv(errors.DEBUG_ENV, raising=False)
    assert not _RaisedAnyway().filter(record) and _RaisedAnyway().filter(other)
    monkeypatch.setenv(errors.DEBUG_ENV, "1")
    assert _RaisedAnyway().filter(record)


def test_a_library_that_keeps_only_the_words_names_the_file():
    """DuckDB raises ``IOException`` with the words of ``strerror`` and the file in quotes."""
    class IOException(Exception):
        pass

    exc = IOException('IO Error: Could not write file "/not-a-folder-here/i.duckdb.tmp-1": No space left on device')
    assert errors.write_failure(exc) == ("ENOSPC", "/not-a-folder-here/i.duckdb.tmp-1")
    assert errors.user_message(exc).startswith("the file system of /not-a-folder-here/i.duckdb.tmp-1 (mounted at /")
