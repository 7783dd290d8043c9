"""Two protocols and a damaged run in one store, made by real sweeps: the board shows the right entries.

What must hold: ``countboard-sweep model=class_blind task=praco_mosaic`` and the same with ``mosaic=official`` are
two entries (neither replaces the other, their run names differ); a later run of the first cell's entry whose data
has one unreadable image is marked (failed units, their share of the units), never replaces the clean run as the entry, and
shows apart only when asked for.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from countboard.index.reader import connect_readonly
from countboard.paths import leaderboard_dir
from tests.conftest import run_sweep, sweep_env

pytestmark = pytest.mark.slow

MOSAIC = ["model=class_blind", "task=praco_mosaic", "seed=0"]


def _board(db, **kw):
    sys.path.insert(0, str(leaderboard_dir()))
    import queries

    keys = ["cnt_precision", "cnt_f1"]
    con = connect_readonly(db)
    try:
        sql = queries.ranking("counters", "cnt_f1", True, True, None, keys, levels=("protocol_label",), **kw)
        by_protocol = {p: con.execute(sql, [None, None, None, None, p, p]).df()
                       for p in ("default", "mosaic=official")}
        runs = con.execute("SELECT run_id, run_name, protocol_label, n_failed_units, failed_share, is_latest, "
                           "n_units, cnt_precision FROM counters ORDER BY end_time").df()
        return by_protocol, runs
    finally:
        con.close()


def test_two_protocols_and_a_damaged_run_give_the_right_entries(tmp_path):
    store = tmp_path / "mlruns"
    run_sweep(MOSAIC, tmp_path)
    run_sweep([*MOSAIC, "mosaic=official"], tmp_path)
    data = tmp_path / "data"
    damaged = tmp_path / "damaged"
    shutil.copytree(data, damaged)
    root = damaged / "synthetic_shapes"
    first = json.loads((root / "Train_Test_Val_FSC_147.json").read_text())["test"][0]
    (root / "images_384_VarV2" / first).write_bytes(b"not an image")  # 1 of the 24 test images unreadable
    run_sweep([*MOSAIC, f"data_dir={damaged}"], tmp_path)

    db = tmp_path / "index.duckdb"
    done = subprocess.run([sys.executable, "-m", "countboard.cli", "index", "--store", str(store), "--db", str(db)],
                          capture_output=True, text=True, env=sweep_env(tmp_path), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    board, runs = _board(db)

    assert runs["protocol_label"].tolist() == ["default", "mosaic=official", "default"]
    clean, official, hurt = (runs.iloc[i] for i in range(3))
    assert official.run_name == f"{clean.run_name} · mosaic=official"  # two protocols never read the same
    # a mosaic unit pairs two images: the unreadable one fails its own mosaics and those it is the distractor of
    assert hurt.n_failed_units >= 1 and hurt.failed_share == pytest.approx(hurt.n_failed_units / hurt.n_units)
    assert clean.n_failed_units == 0 and official.n_failed_units == 0
    assert runs["is_latest"].tolist() == [True, True, False]  # the later damaged run replaces nothing
    assert clean.cnt_precision != official.cnt_precision

    for protocol, run in (("default", clean), ("mosaic=official", official)):
        entry = board[protocol]
        assert len(entry) == 1 and entry.run_id.iloc[0] == run.run_id
        assert entry.cnt_precision.iloc[0] == pytest.approx(run.cnt_precision)
        assert entry.n_failed_units.iloc[0] == 0

    apart, _ = _board(db, include_failed=True)
    rows = apart["default"].set_index("failed")
    assert rows.loc[False, "run_id"] == clean.run_id and rows.loc[True, "run_id"] == hurt.run_id
    assert rows.loc[True, "n_failed_units"] == hurt.n_failed_units
