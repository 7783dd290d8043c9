"""The board under an index that goes bad while it runs: damaged, truncated, replaced, deleted, locked by a writer,
of another schema. Every page shows one line naming the index and the command that rebuilds it, never a
traceback, and shows itself again once the index is good (the command of that line run, the lock released) with
no restart: the same AppTest session reruns."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap

import duckdb
import pytest
from tests.fixtures.board import app_test

from countboard import cli

ALL_PAGES = ("views/overview.py", "views/counters.py", "views/numeracy.py", "views/acs.py", "views/grounding.py",
             "views/runs.py", "views/annotate.py")
SOME_PAGES = ("views/overview.py", "views/runs.py", "views/counters.py")


@pytest.fixture
def live_index(filled_index, tmp_path, monkeypatch):
    """A copy of the filled index the board reads (the store it names stays where it is)."""
    store, db = filled_index
    live = tmp_path / "index.duckdb"
    shutil.copyfile(db, live)
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(live))
    monkeypatch.setenv("COUNTBOARD_MLFLOW_UI", "http://127.0.0.1:9")
    monkeypatch.delenv("COUNTBOARD_STORE", raising=False)
    return store, live


def _healthy(at) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert not any("index" in w.value and ("cannot be read" in w.value or "locked" in w.value) for w in at.warning)
    assert at.dataframe or at.get("page_link") or at.get("radio"), "the page drew nothing of the index"


def _fault_line(at, db) -> str:
    """The one line about the index: names its path and a ``countboard index`` command; no exception."""
    assert not at.exception, [e.message for e in at.exception]
    lines = [x.value for x in [*at.warning, *at.info] if f"`{db}`" in x.value and "countboard index" in x.value]
    assert len(lines) == 1, [x.value for x in [*at.warning, *at.info]]
    assert "\n" not in lines[0]
    return lines[0]


def _run_rebuild(line: str, store_dir) -> None:
    """Run the ``countboard index …`` command the line names, as a reader would paste it."""
    command = next(c for c in re.findall(r"`([^`]+)`", line) if c.startswith("countboard index"))
    argv = shlex.split(command)
    assert argv[argv.index("--store") + 1] == str(store_dir)
    assert cli.main(argv[1:]) == 0


def _damage(db) -> None:
    """Bytes written over in the middle half of the file, in place (same inode): its catalog among them."""
    size = db.stat().st_size
    with open(db, "r+b") as f:
        for offset in range(size // 4, 3 * size // 4, 65536):
            f.seek(offset)
            f.write(b"\xa5" * 1024)


def _damage_all_but_meta(db) -> None:
    """Bytes written over in every data block of every table but ``meta``, in place: the file opens and its
    schema version reads, and the page's first query of a table fails (DuckDB checks each block's checksum)."""
    with duckdb.connect(str(db), read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        blocks = {t: {b for (b,) in con.execute("SELECT DISTINCT block_id FROM pragma_storage_info(?) "
                                                "WHERE block_id >= 0", [t]).fetchall()} for t in tables}
        block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]
    hit = set().union(*(b for t, b in blocks.items() if t != "meta")) - blocks["meta"]
    assert hit
    with open(db, "r+b") as f:
        for block in hit:
            f.seek(3 * 4096 + block * block_size + 64)  # after the file's three header pages
            f.write(b"\xa5" * 512)


def _truncate(db) -> None:
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 3)


@pytest.mark.parametrize("page", ALL_PAGES)
def test_an_index_damaged_under_the_page_is_one_line_until_rebuilt(live_index, page):
    """The damage is met by the page's first query of a table, in the middle of drawing it."""
    store, db = live_index
    at = app_test(page).run()
    _healthy(at)
    _damage_all_but_meta(db)
    at.run()
    line = _fault_line(at, db)
    assert "cannot be read" in line and "Corrupt database file" in line and "--full" in line
    at.run()  # the next rerun shows the same line at once, the page not run again over the damaged file
    assert _fault_line(at, db) == line
    _run_rebuild(line, store.store_dir)
    at.run()
    _healthy(at)


@pytest.mark.parametrize("page", SOME_PAGES)
@pytest.mark.parametrize(("fault", "says"), [(_damage, "cannot be read"), (_truncate, "")],
                         ids=["damaged_in_its_middle", "truncated"])
def test_a_damaged_index_is_one_line_until_rebuilt(live_index, page, fault, says):
    store, db = live_index
    at = app_test(page).run()
    _healthy(at)
    fault(db)
    at.run()
    line = _fault_line(at, db)
    assert says in line
    _run_rebuild(line, store.store_dir)
    at.run()
    _healthy(at)


@pytest.mark.parametrize("page", SOME_PAGES)
def test_a_deleted_index_is_one_line_until_built_again(live_index, page):
    store, db = live_index
    at = app_test(page).run()
    _healthy(at)
    db.unlink()
    at.run()
    line = _fault_line(at, db)
    assert "There is no index" in line and "--full" not in line
    _run_rebuild(line, store.store_dir)
    at.run()
    _healthy(at)


def test_an_index_replaced_by_another_is_read_at_once(live_index, filled_index, empty_index, tmp_path):
    """Another valid index moved over the file: the page reads the new one on its next rerun."""
    store, db = live_index
    at = app_test("views/runs.py").run()
    _healthy(at)
    assert len(at.dataframe[0].value) > 0
    other = tmp_path / "other.duckdb"
    shutil.copyfile(empty_index[1], other)
    os.replace(other, db)
    at.run()
    assert not at.exception and not at.dataframe
    assert "The index has no runs yet." in " ".join(i.value for i in at.info)
    shutil.copyfile(filled_index[1], other)
    os.replace(other, db)
    at.run()
    _healthy(at)


@pytest.mark.parametrize("page", SOME_PAGES)
def test_an_index_of_other_tables_under_the_page_asks_for_a_rebuild(live_index, tmp_path, page):
    store, db = live_index
    at = app_test(page).run()
    _healthy(at)
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE results (name VARCHAR, value DOUBLE)")
    os.replace(other, db)
    at.run()
    line = _fault_line(at, db)
    assert "schema version unknown" in line
    _run_rebuild(line, store.store_dir)
    at.run()
    _healthy(at)


LOCKER = textwrap.dedent("""
    import sys, duckdb
    con = duckdb.connect(sys.argv[1])  # a writer: DuckDB's exclusive lock on the file
    con.execute("CREATE TABLE IF NOT EXISTS lock_probe (x INTEGER)")
    print("locked", flush=True)
    sys.stdin.read()
    con.close()
""")


@pytest.mark.parametrize("page", SOME_PAGES)
def test_an_index_locked_by_a_writer_is_one_line_until_the_lock_is_released(live_index, filled_index, tmp_path, page):
    store, db = live_index
    at = app_test(page).run()
    _healthy(at)
    # a new file in the index's place (as `countboard index` swaps one in), then a writer takes it before the board
    # has read it
    fresh = tmp_path / "fresh.duckdb"
    shutil.copyfile(filled_index[1], fresh)
    os.replace(fresh, db)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        at.run()
        line = _fault_line(at, db)
        assert "locked by another process" in line
        at.run()  # still locked: still the line
        assert _fault_line(at, db) == line
    finally:
        locker.communicate("", timeout=30)
    at.run()
    _healthy(at)
