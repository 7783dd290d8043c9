"""Datasets tracked the MLflow way: name, digest, source and context of each run's data (``tracking.datasets``)."""

from __future__ import annotations

import pytest

from countboard.tracking import tracker_from_config
from countboard.tracking.datasets import DEFAULT_CONTEXT, DatasetRef


def test_a_dataset_config_node_names_its_data(tmp_path):
    ref = DatasetRef.from_config({"name": "fsc147", "root": str(tmp_path / "fsc"), "split": "val"}, "ab12")
    assert ref == DatasetRef("fsc147", "ab12", str((tmp_path / "fsc").resolve()), "val", "local")
    generated = DatasetRef.from_config({"name": "shapes", "_target_": "countboard.counting.datasets.Shapes"}, "v1")
    assert (generated.source, generated.source_type, generated.context) == (
        "countboard.counting.datasets.Shapes", "code", DEFAULT_CONTEXT)
    # a generated dataset has no data fingerprint: its config is its identity
    node = {"name": "shapes", "n": 20}
    assert DatasetRef.from_config(node, "").digest == DatasetRef.from_config(dict(node), "").digest
    assert DatasetRef.from_config(node, "").digest != DatasetRef.from_config({**node, "n": 21}, "").digest


def test_datasets_are_logged_once_per_run(tmp_path):
    tracker = tracker_from_config({"kind": "local", "store_dir": str(tmp_path / "mlruns")})
    run_id = tracker.create_run(tracker.experiment_id("e"), "r", {})
    ref = DatasetRef("fsc147", "0123456789abcdef", "/data/fsc147", "test")
    tracker.log_datasets(run_id, [ref])
    tracker.log_datasets(run_id, [ref])  # a resumed cell logs it again: nothing is added
    (got,) = tracker.client.get_run(run_id).inputs.dataset_inputs
    assert (got.dataset.name, got.dataset.digest, got.dataset.source, got.dataset.source_type) == (
        "fsc147", "0123456789abcdef", "/data/fsc147", "local")
    assert [(t.key, t.value) for t in got.tags] == [("mlflow.data.context", "test")]
    # MLflow's runs table filters by them
    found = tracker.client.search_runs([tracker.experiment_id("e")], "dataset.name = 'fsc147' AND "
                                       "dataset.context = 'test'")
    assert [r.info.run_id for r in found] == [run_id]


def test_cells_logging_one_dataset_at_once_both_get_it(tmp_path, monkeypatch):
    """MLflow looks a dataset up, then inserts it: a cell that loses that race to another process meets a
    unique-constraint error, and its second try links the run to the row the other inserted."""
    tracker = tracker_from_config({"kind": "local", "store_dir": str(tmp_path / "mlruns")})
    exp = tracker.experiment_id("e")
    first, second = tracker.create_run(exp, "a", {}), tracker.create_run(exp, "b", {})
    ref = DatasetRef("toy", "b784c7678ce5416b", "countboard_toy.ToyDataset", "test", "code")
    real = tracker.client.log_inputs
    calls = []

    def racing(run_id, datasets=None, **kw):
        calls.append(run_id)
        if run_id == second and calls.count(second) == 1:  # the other process inserts the row in between
            real(first, datasets=datasets, **kw)
            raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
                               "datasets.name, datasets.digest")
        return real(run_id, datasets=datasets, **kw)

    monkeypatch.setattr(tracker.client, "log_inputs", racing)
    tracker.log_datasets(second, [ref])
    for run_id in (first, second):
        (got,) = tracker.client.get_run(run_id).inputs.dataset_inputs
        assert (got.dataset.name, got.dataset.digest) == ("toy", "b784c7678ce5416b")
    assert calls == [second, second]


def test_other_errors_of_logging_datasets_are_not_retried(tmp_path, monkeypatch):
    tracker = tracker_from_config({"kind": "local", "store_dir": str(tmp_path / "mlruns")})
    run_id = tracker.create_run(tracker.experiment_id("e"), "r", {})
    calls = []

    def broken(*a, **kw):
        calls.append(1)
        raise RuntimeError("no such table: datasets")

    monkeypatch.setattr(tracker.client, "log_inputs", broken)
    with pytest.raises(RuntimeError, match="no such table"):
        tracker.log_datasets(run_id, [DatasetRef("toy", "ab", "src", "test", "code")])
    assert calls == [1]
