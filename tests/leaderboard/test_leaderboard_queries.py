"""The leaderboard's ranking SQL on a store where a counter has one run per task (negative-label, mosaic)."""

from __future__ import annotations

import pandas as pd
import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from tests.fixtures.synthetic_store import FamilySpec, make_store

import queries
from countboard.index import build_index
from countboard.index.reader import connect_readonly

MODELS = ["alpha", "beta", "gamma"]
KEYS = ["nmn", "mae", "cnt_f1"]


@pytest.fixture(scope="module")
def two_task_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_tasks")
    specs = [FamilySpec("counters", {"nmn": False, "mae": False}, MODELS, ["fsc147"], task="praco_negative"),
             FamilySpec("counters", {"cnt_f1": True}, MODELS, ["fsc147"], task="praco_mosaic")]
    store = make_store(root, specs, seed=5, with_artifacts=False)
    client = MlflowClient(tracking_uri=store.uri)
    # a later classic run of alpha also reports MAE: the entry must take the most recent value
    late = client.create_run(store.experiment_id, tags={"family": "counters", "model": "alpha", "dataset": "fsc147",
                                                        "split": "test", "task": "classic"})
    client.log_batch(late.info.run_id, metrics=[Metric("mae", 0.25, 10**13, 0)])
    client.set_terminated(late.info.run_id)
    db = root / "index.duckdb"
    build_index(store.uri, db)
    return store, db, late.info.run_id


def _rank(db, sort: str, descending: bool, columns=None) -> pd.DataFrame:
    con = connect_readonly(db)
    try:
        sql = queries.ranking("counters", sort, descending, True, columns, KEYS)
        return con.execute(sql, [None] * 4).df()
    finally:
        con.close()


def test_one_entry_per_model_with_metrics_of_both_tasks(two_task_index):
    store, db, late = two_task_index
    table = _rank(db, "cnt_f1", True)
    assert sorted(table.model) == MODELS and table[KEYS].notna().all().all()
    v = store.values
    expected = v.groupby("model").agg({k: "max" for k in KEYS})  # each key comes from one task's runs
    mosaic = expected.cnt_f1.sort_values(ascending=False)
    assert list(table.model) == list(mosaic.index)
    assert table.set_index("model").cnt_f1.to_dict() == pytest.approx(mosaic.to_dict())
    assert table.set_index("model").loc["alpha", "mae"] == pytest.approx(0.25)
    assert table.set_index("model").loc["beta", "nmn"] == pytest.approx(expected.loc["beta", "nmn"])
    alpha = table.set_index("model").loc["alpha"]
    assert len(alpha.run_ids) == 3 and alpha.run_ids[0] == late
    assert set(alpha.task.split(", ")) == {"praco_negative", "praco_mosaic", "classic"}


def test_sort_direction_and_narrow_columns(two_task_index):
    _, db, _ = two_task_index
    table = _rank(db, "nmn", False, columns=["nmn"])
    assert list(table.nmn) == sorted(table.nmn)
    assert "cnt_f1" not in table and "mae" not in table
    with pytest.raises(ValueError, match="snake_case"):
        queries.ranking("counters", "nmn; DROP TABLE runs", True, True, None, KEYS)


def test_metric_reported_by_several_tasks_keeps_tasks_apart(two_task_index):
    _, db, _ = two_task_index
    con = connect_readonly(db)
    try:
        assert con.execute(queries.tasks_reporting("counters", "mae")).fetchone()[0] == 2
        assert con.execute(queries.tasks_reporting("counters", "cnt_f1")).fetchone()[0] == 1
        sql = queries.ranking("counters", "mae", False, True, ["mae"], KEYS, by_task=True)
        table = con.execute(sql, [None] * 4).df()
    finally:
        con.close()
    assert sorted(table[table.model == "alpha"].task) == ["classic", "praco_negative"]
    assert len(table) == len(MODELS) + 1 and list(table.mae) == sorted(table.mae)
