"""The bulk store generator (``tests/fixtures/bulk_store.py``) writes runs MLflow reads back as the engine's."""

from __future__ import annotations

import pandas as pd
import pytest
from tests.fixtures.bulk_store import make_bulk_store
from tests.fixtures.synthetic_store import FamilySpec, make_store

from countboard.index import build_index
from countboard.tracking import manifest


@pytest.fixture(scope="module")
def bulk(tmp_path_factory):
    return make_bulk_store(tmp_path_factory.mktemp("bulk"), runs=90, metrics=20, models=10, datasets=2, splits=2,
                           seeds=2, gallery_models=1)


def test_runs_read_back_through_mlflow_client(bulk):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=bulk.uri)
    listed = client.search_runs([bulk.experiment_id], max_results=1000)
    cells = [r for r in listed if r.data.tags.get("countboard.role") == "cell"]
    sweeps = [r for r in listed if r.data.tags.get("countboard.role") == "sweep"]
    families = bulk.runs.family.nunique()  # every family of the schema
    assert families == len(bulk.metric_keys) and len(cells) == 90 and len(sweeps) == families * 2  # × 2 datasets
    for i in (0, 7, 89):
        run = client.get_run(bulk.run_ids[i])
        row = bulk.runs.iloc[i]
        tags, params = run.data.tags, run.data.params
        assert run.info.status == "FINISHED" and run.info.end_time == row.end_time
        assert (tags["family"], tags["model"], tags["dataset"], tags["seed"]) == (
            row.family, row.model, row.dataset, str(row.seed))
        assert params["dataset.split"] == row.split and params["model.name"] == row.model
        assert tags["mlflow.parentRunId"] in {s.info.run_id for s in sweeps}
        keys = bulk.metric_keys[row.family]
        assert len(keys) == 20
        assert run.data.metrics == pytest.approx(dict(zip(keys, bulk.values[i], strict=True)))
        files = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert "config.yaml" in files
        listing = manifest.decode(tags, run.info.status, run.info.end_time)
        assert listing is not None and {p for p, is_dir, _ in listing if not is_dir} >= {"config.yaml"}


def test_best_models_carry_the_pages_artifacts(bulk):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=bulk.uri)
    runs = bulk.runs.assign(cnt_f1=bulk.values[:, bulk.metric_keys["counters"].index("cnt_f1")])
    runs = runs[(runs.family == "counters") & (runs.seed == 0) & (runs.repeat == 0)]
    best = runs.groupby("model").cnt_f1.mean().idxmax()
    for run in runs.itertuples():
        tables = {a.path for a in client.list_artifacts(run.run_id, "tables")}
        assert ("tables/mosaic_pairs.parquet" in tables) == (run.model == best), run


def test_cells_repeat_as_forced_reruns_and_index(bulk, tmp_path):
    # 90 runs dealt to the schema's families, each cycling through its models × 2 datasets × 2 splits × 2 seeds:
    # a family's runs past its number of cells are reruns of its first cells, later and with the same config_hash
    cells_per_family = bulk.runs.groupby("family")[["model", "dataset", "split", "seed"]].apply(
        lambda g: len(g.drop_duplicates()))
    size = bulk.runs.groupby("family").size()
    assert size.sum() == 90 and (bulk.runs.groupby("family").repeat.sum() == size - cells_per_family).all()
    again = bulk.runs[bulk.runs.repeat == 1]
    assert len(again) > 0
    first = bulk.runs[bulk.runs.repeat == 0].set_index(["family", "model", "dataset", "split", "seed"])
    for row in again.itertuples():
        assert row.start_time > first.loc[(row.family, row.model, row.dataset, row.split, row.seed)].start_time
    stats = build_index(bulk.uri, tmp_path / "index.duckdb")
    sweeps = bulk.runs.family.nunique() * 2  # a parent sweep run per family and dataset
    assert stats.runs == 90 + sweeps and stats.artifacts_listed == 0  # every run's manifest is used


def test_sqlite_listing_equals_the_client_listing(tmp_path):
    """``list_runs`` read straight from SQLite gives the snapshots ``MlflowClient.search_runs`` gives, for active
    and deleted runs, with a NaN metric, a stepped metric and a lease run (left out by both)."""
    from mlflow.tracking import MlflowClient

    from countboard.index import source

    spec = FamilySpec("counters", {"cnt_f1": True, "mae": False}, models=["a", "b", "c"], datasets=["fsc147"])
    store = make_store(tmp_path, [spec], seed=1, with_artifacts=False, history_steps=3)
    client = MlflowClient(tracking_uri=store.uri)
    client.log_metric(store.run_ids[0], "mae", float("nan"), step=5)
    client.delete_run(store.run_ids[1])
    lease = client.create_run(store.experiment_id, tags={"countboard.role": "lease"})
    client.set_tag(store.run_ids[2], "mlflow.runName", "renamed")
    exps = [store.experiment_id]
    for deleted in (False, True):
        direct = source.list_runs(client, exps, deleted=deleted, store_uri=store.uri)
        through = source.list_runs(client, exps, deleted=deleted)
        assert set(direct.runs) == set(through.runs) and lease.info.run_id not in direct.runs
        assert len(direct.runs) == (1 if deleted else 3)  # 2 cells + the sweep, or the deleted cell
        for rid, snap in through.runs.items():
            assert repr(direct.runs[rid]) == repr(snap)
            assert direct.runs[rid].fingerprint == snap.fingerprint
        order = ["run_id", "key"]
        pd.testing.assert_frame_equal(direct.metrics.sort_values(order, ignore_index=True),
                                      through.metrics.sort_values(order, ignore_index=True))
        assert deleted or direct.metrics["value"].isna().sum() == 1  # the NaN, as NaN


def test_update_rebuilds_only_the_tables_of_changed_families(tmp_path):
    """After a full build, an update rebuilds the wide tables of the families whose runs changed; a family
    tagged on runs only loses its view with its last run."""
    import duckdb
    from mlflow.tracking import MlflowClient

    specs = [FamilySpec("counters", {"cnt_f1": True}, models=["a", "b"], datasets=["fsc147"]),
             FamilySpec("grounding", {"iou_soft": True}, models=["g"], datasets=["refcoco"])]
    store = make_store(tmp_path / "s", specs, seed=2, with_artifacts=False)
    db = tmp_path / "index.duckdb"
    build_index(store.uri, db)

    def rows(view: str) -> int:
        con = duckdb.connect(str(db), read_only=True)
        try:
            return con.execute(f"SELECT count(*) FROM {view}").fetchone()[0]
        finally:
            con.close()

    assert (rows("counters"), rows("grounding")) == (2, 1)
    client = MlflowClient(tracking_uri=store.uri)
    for family, model in (("counters", "c"), ("extra_family", "x")):
        run = client.create_run(store.experiment_id, tags={"family": family, "model": model, "dataset": "fsc147",
                                                           "task": "t", "config_hash": f"h-{model}"})
        client.log_metric(run.info.run_id, "cnt_f1", 0.5)
        client.set_terminated(run.info.run_id)
    build_index(store.uri, db)
    assert (rows("counters"), rows("grounding"), rows("extra_family")) == (3, 1, 1)
    client.delete_run(run.info.run_id)
    build_index(store.uri, db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        views = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        con.close()
    assert "extra_family" not in views and {"counters", "grounding"} <= views
