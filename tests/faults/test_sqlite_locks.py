"""Checking a store never drops the SQLite locks of the process that checks it.

Closing any descriptor of a file drops every POSIX lock the process holds on it (sqlite.org/howtocorrupt.html,
2.2). A sweep that opens its next cell checks the store while MLflow's pooled connections are open; when that
check read the header with ``open()``/``close()``, another sweep's last connection, stopped by SIGTERM, found no
lock left, checkpointed and deleted the WAL under the survivor: its fresh connections failed with
SQLITE_IOERR_SHORT_READ, and what it wrote next went into the deleted WAL and was lost.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import sweep_env

# The surviving sweep, in its own process: a connection stays open (MLflow's pool), the store is checked as every
# open checks it, another process writes and exits, then this one writes on and reads with a fresh connection.
SURVIVOR = textwrap.dedent("""
    import sqlite3, subprocess, sys
    from pathlib import Path
    from countboard.tracking.integrity import check_db

    db = Path(sys.argv[1])
    pool = sqlite3.connect(db, isolation_level=None)
    pool.execute("PRAGMA journal_mode=WAL")
    pool.execute("CREATE TABLE t (x)")
    pool.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(2000)])
    assert check_db(db).kind in ("ok", "foreign"), check_db(db)
    other = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); " \\
            "c.executemany('INSERT INTO t VALUES (?)', [(i,) for i in range(3000)]); c.close()"
    subprocess.run([sys.executable, "-c", other, str(db)], check=True)
    pool.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    try:
        fresh = sqlite3.connect(db).execute("SELECT count(*) FROM t").fetchone()[0]
    except sqlite3.Error as exc:
        fresh = f"{exc} ({getattr(exc, 'sqlite_errorname', '')})"
    print(fresh, Path(f"{db}-wal").exists())
    pool.close()
""")


def test_a_check_keeps_the_locks_of_the_process_so_no_write_is_lost(tmp_path):
    db = tmp_path / "mlflow.db"
    proc = subprocess.run([sys.executable, "-c", SURVIVOR, str(db)], capture_output=True, text=True, timeout=120,
                          env=sweep_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    fresh, wal_kept = proc.stdout.strip().rsplit(maxsplit=1)
    assert fresh == "5100" and wal_kept == "True"  # was: disk I/O error (SQLITE_IOERR_SHORT_READ), WAL deleted
    count = subprocess.run([sys.executable, "-c", "import sqlite3, sys; print(sqlite3.connect(sys.argv[1])"
                            ".execute('SELECT count(*) FROM t').fetchone()[0])", str(db)],
                           capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert count == "5100"  # was 5000: the survivor's last 100 rows went into the deleted WAL
