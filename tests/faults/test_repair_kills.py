"""``doctor --fix`` killed at every step of a repair leaves a store that commands recognise: ``mlflow.db`` is the
damaged database or the recovered one, never missing; ``doctor`` names what the stop left, ``--fix`` completes or
cleans it, and no command makes a new, empty store beside the leftovers. Real processes, SIGKILL at named points
(``COUNTBOARD_FAILPOINT``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from countboard.tracking import integrity
from tests.conftest import run_sweep
from tests.faults.conftest import TOY, cell_runs, countboard
from tests.faults.test_store_damage import garble_pages

pytestmark = pytest.mark.slow

#: Where a kill lands, and the words ``doctor`` then names the store's state with.
STEPS = {
    "repair_build": "left by a repair that was stopped",
    "repair_built": "left by a repair that was stopped",
    "repair_intent": "a repair was stopped before",
    "repair_kept": "a repair was stopped before",
    "repair_sidecars": "a repair was stopped before",
    "repair_swapped": "left by a repair that finished",
}


def _kept(store: Path) -> list[Path]:
    return [p for p in store.glob("mlflow.db.damaged-*") if not p.name.endswith(integrity.SIDECARS)]


def _leftovers(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir() if ".recovered-" in p.name or p.name.endswith(".repair"))


def _finish_and_check(store: Path, tmp_path: Path, damaged: bytes) -> None:
    fixed = countboard("doctor", "--store", str(store), "--fix", cwd=tmp_path)
    if fixed.returncode:  # the garbled page held the run's params: a second --fix marks it for the next sweep
        assert "1 left: [config] cell run" in fixed.stdout, fixed.stdout + fixed.stderr
        fixed = countboard("doctor", "--store", str(store), "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    again = countboard("doctor", "--store", str(store), cwd=tmp_path)
    assert "store is consistent" in again.stdout, again.stdout + again.stderr
    assert integrity.check_db(store / "mlflow.db", full=True).ok
    assert _leftovers(store) == []
    kept = _kept(store)
    assert kept and all(p.read_bytes() == damaged for p in kept)  # the damaged original, byte for byte
    run_sweep(TOY, tmp_path, store=store)  # the same run, its units from checkpoints
    cells = cell_runs(store)
    assert len(cells) == 1 and set(cells["status"]) == {"FINISHED"} and cells["metrics.n_samples"].iloc[0] == 12


@pytest.mark.parametrize("step", list(STEPS))
def test_a_repair_killed_at_each_step_leaves_a_store_commands_know(store_copy, tmp_path, step):
    db = store_copy / "mlflow.db"
    garble_pages(db, "params")
    damaged = db.read_bytes()
    killed = countboard("doctor", "--store", str(store_copy), "--fix", cwd=tmp_path, COUNTBOARD_FAILPOINT=step)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert db.is_file()  # the damaged database or the recovered one, at every step
    assert integrity.check_db(db).kind in (integrity.OK, integrity.DAMAGED)

    listed = countboard("doctor", "--store", str(store_copy), cwd=tmp_path)
    assert listed.returncode == 1 and STEPS[step] in listed.stdout, listed.stdout + listed.stderr
    if step in ("repair_intent", "repair_kept", "repair_sidecars"):  # a reader refuses until a writer completes
        index = countboard("index", "--store", str(store_copy), "--db", str(tmp_path / "i.duckdb"), cwd=tmp_path)
        assert index.returncode != 0 and "doctor" in index.stderr and "--fix" in index.stderr, index.stderr
        assert len(index.stderr.strip().splitlines()) == 1 and not (tmp_path / "i.duckdb").exists()
    _finish_and_check(store_copy, tmp_path, damaged)


@pytest.mark.parametrize("left", ["recovered", "damaged only"])
def test_a_store_that_lost_its_database_is_never_made_again(store_copy, tmp_path, left):
    """What a repair of an older version left when killed after it moved the damaged database aside: no
    ``mlflow.db``, the damaged file (with its WAL) under its kept name, maybe the recovered file."""
    db = store_copy / "mlflow.db"
    garble_pages(db, "params")
    damaged = db.read_bytes()
    if left == "recovered":
        killed = countboard("doctor", "--store", str(store_copy), "--fix", cwd=tmp_path,
                            COUNTBOARD_FAILPOINT="repair_built")
        assert killed.returncode == -signal.SIGKILL
    aside = store_copy / "mlflow.db.damaged-20250101T000000-1"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            os.replace(f"{db}{suffix}", f"{aside}{suffix}")
    Path(f"{db}-wal").write_bytes(b"")  # what a later open of the folder leaves

    sweep = run_sweep(TOY, tmp_path, store=store_copy, check=False)
    assert sweep.returncode != 0 and "has no mlflow.db but holds" in sweep.stderr, sweep.stderr[-2000:]
    assert not db.exists()  # no new, empty store
    index = countboard("index", "--store", str(store_copy), "--db", str(tmp_path / "i.duckdb"), cwd=tmp_path)
    assert index.returncode != 0 and "has no mlflow.db but holds" in index.stderr
    listed = countboard("doctor", "--store", str(store_copy), cwd=tmp_path)
    assert listed.returncode == 1 and "is missing" in listed.stdout, listed.stdout + listed.stderr
    _finish_and_check(store_copy, tmp_path, damaged)
