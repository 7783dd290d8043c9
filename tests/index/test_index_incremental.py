"""An index updated run by run holds exactly what a build from scratch of the same store holds: every table
(the per-run tables, each family's wide table with ``is_latest``, the seed cells), column for column and value
for value, after new, changed, deleted and moved runs."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from tests.fixtures.synthetic_store import FamilySpec, make_store

from countboard.index import build_index
from countboard.index.reader import connect_readonly

SPECS = [FamilySpec("counters", {"cnt_f1": True, "mae": False, "n_samples": None}, ["alpha", "beta"],
                    ["fsc147", "carpk"]),
         FamilySpec("grounding", {"iou_soft": True}, ["vlm_a"], ["refcoco"])]


@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("store"), SPECS, seed=5, repeats=2, with_artifacts=False)


def _tables(db) -> dict[str, pd.DataFrame]:
    con = connect_readonly(db)
    try:
        names = [n for (n,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'idx' "
                                           "ORDER BY 1").fetchall()]
        out = {}
        for name in names:
            types = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'idx' "
                                "AND table_name = ? ORDER BY column_index", [name]).fetchall()
            frame = con.execute(f'SELECT * FROM "{name}" ORDER BY ALL').df()
            if name == "meta":  # when it was built differs
                frame = frame[~frame.key.isin(["indexed_at", "listed_ms", "store_marks"])].reset_index(drop=True)
            out[name] = (types, frame)
        out["views"] = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()
        return out
    finally:
        con.close()


def _assert_same_as_full(uri, db, tmp_path) -> None:
    full = tmp_path / "full.duckdb"
    for p in tmp_path.glob("full.duckdb*"):
        p.unlink()
    build_index(uri, full, full=True)
    got, want = _tables(db), _tables(full)
    assert got.keys() == want.keys()
    assert got.pop("views") == want.pop("views")
    for name, (types, frame) in want.items():
        assert got[name][0] == types, name
        pd.testing.assert_frame_equal(got[name][1], frame, check_exact=True, obj=name)


@pytest.mark.slow  # seven full builds to compare with: ~30 s of CPU
def test_updates_run_by_run_equal_a_full_build(base_store, tmp_path):
    shutil.copytree(base_store.store_dir, tmp_path / "s")
    uri = base_store.uri.replace(str(base_store.store_dir), str(tmp_path / "s"))
    db = tmp_path / "index.duckdb"
    build_index(uri, db)
    client = MlflowClient(tracking_uri=uri)
    exp = base_store.experiment_id

    def cell(model: str, family: str = "counters", seed: int = 0) -> str:
        run = client.create_run(exp, tags={"family": family, "model": model, "dataset": "fsc147", "task": "t",
                                           "config_hash": f"h-{model}-{seed}", "replicate_hash": f"r-{model}",
                                           "seed": str(seed)})
        client.log_batch(run.info.run_id, metrics=[Metric("cnt_f1", 0.1 + seed / 7, 10**12, 0),
                                                   Metric("mae", 3.0 / (seed + 3), 10**12, 0)])
        client.set_terminated(run.info.run_id)
        return run.info.run_id

    # new runs: a new entry with two seeds (one cell), and a rerun of an existing entry
    new = [cell("delta", seed=0), cell("delta", seed=1), cell("alpha")]
    stats = build_index(uri, db, update="scan")
    assert (stats.added, stats.rebuilt) == (3, False)
    _assert_same_as_full(uri, db, tmp_path)
    # a metric logged into an ended run (its value moves, the cell's mean and spread with it)
    client.log_batch(new[0], metrics=[Metric("cnt_f1", 0.9, 10**12 + 1, 0)])
    assert build_index(uri, db, update="scan").updated == 1
    _assert_same_as_full(uri, db, tmp_path)
    # deleted runs: a seed of a cell, and the latest run of an entry
    client.delete_run(new[1])
    client.delete_run(new[2])
    assert build_index(uri, db, update="scan").removed == 2
    _assert_same_as_full(uri, db, tmp_path)
    # a new metric column in a family
    client.log_batch(new[0], metrics=[Metric("new_score", 0.25, 10**12 + 2, 0)])
    build_index(uri, db, update="scan")
    assert "new_score" in _tables(db)["wide_counters"][1].columns
    _assert_same_as_full(uri, db, tmp_path)
    # a run that changes family, and one that changes protocol
    client.set_tag(new[0], "family", "grounding")
    client.set_tag(base_store.run_ids[0], "protocol", "p0000001")
    client.set_tag(base_store.run_ids[0], "protocol_label", "mosaic=2x2")
    assert build_index(uri, db, update="scan").updated == 2
    _assert_same_as_full(uri, db, tmp_path)
    # the quick update sees a new run the same way
    cell("epsilon")
    assert build_index(uri, db, update="quick").added == 1
    _assert_same_as_full(uri, db, tmp_path)
