"""Read-only connections to the index that follow it when ``countboard index`` swaps in a new file."""

from __future__ import annotations

import os

import duckdb

CATALOG = "idx"


def connect_readonly(db_path: str | os.PathLike) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the index file as it is now.

    ``duckdb.connect(path)`` reuses a database already open in this process under the same path, which still
    shows the file that a rebuild replaced; attaching the file to a fresh in-memory database always opens the
    current one. New cursors must run ``use_index(cursor)`` before querying unqualified names.
    """
    con = duckdb.connect(":memory:")
    con.execute(f"ATTACH ? AS {CATALOG} (READ_ONLY)", [str(db_path)])
    use_index(con)
    return con


def use_index(con) -> None:
    con.execute(f"USE {CATALOG}")
