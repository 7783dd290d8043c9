"""Sweeps into an MLflow server on PostgreSQL with proxied artifacts; the index and the leaderboard read it."""

from __future__ import annotations

import hashlib
import re
import sys

import pandas as pd
import pytest

from countboard.cli import main as cli_main
from countboard.index.reader import connect_readonly
from countboard.paths import leaderboard_dir
from countboard.schema import load_schema
from tests.conftest import FIXTURES, run_sweep, store_runs, sweep_env

pytestmark = pytest.mark.integration
TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config"]


def server_runs(url: str, experiment: str) -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(url)
    return mlflow.search_runs(experiment_names=[experiment])


def to_server(url: str, experiment: str) -> list[str]:
    return ["tracking=server", f"tracking.uri={url}", f"tracking.experiment={experiment}"]


def test_sweep_rerun_and_kill_resume_on_the_server(mlflow_server, tmp_path):
    url = mlflow_server.url
    grid = [*TOY, "-m", "model=toy,toy_double", "task=toy,toy_b", *to_server(url, "grid")]
    run_sweep(grid, tmp_path)
    runs = server_runs(url, "grid")
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 4 and set(cells.status) == {"FINISHED"}
    assert set(runs[runs["tags.countboard.role"] == "sweep"].status) == {"FINISHED"}
    assert set(cells["params.model.scale"]) == {"1.0", "2.0"}
    assert cells[cells["tags.model"] == "toy_double"]["metrics.mae"].tolist() == [pytest.approx(5.5)] * 2
    import mlflow

    client = mlflow.MlflowClient(url)
    listed = {a.path for a in client.list_artifacts(cells.run_id.iloc[0])}
    assert {"samples.parquet", "config.yaml", "tables"} <= listed
    assert cells.artifact_uri.str.startswith("mlflow-artifacts:").all()  # proxied: the server holds the files
    assert list(mlflow_server.artifacts.rglob("samples.parquet"))

    again = run_sweep(grid, tmp_path)
    skipped = re.findall(r"skip .*: finished run", again.stdout + again.stderr)
    assert len(skipped) == 4 and len(server_runs(url, "grid")) == 5

    calls = tmp_path / "calls.log"
    killed = [*TOY, f"task.calls_log={calls}", "task.kill_at=u008", "checkpoint_every=4", *to_server(url, "kill")]
    assert run_sweep(killed, tmp_path, check=False).returncode == -9
    run_sweep(killed, tmp_path)
    assert sorted(calls.read_text().split()) == [f"u{i:03d}" for i in range(12)]  # each unit computed once
    cells = server_runs(url, "kill")
    assert len(cells) == 1 and cells.status.iloc[0] == "FINISHED"


def _leaderboard_view(db, monkeypatch) -> dict:
    """What the leaderboard's data layer shows of the counters: mosaic images and count-drift tables, by cell
    (the artifacts the Counters page's figures read, as the schema declares them)."""
    if str(leaderboard_dir()) not in sys.path:
        sys.path.insert(0, str(leaderboard_dir()))
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(db))
    import data

    figures = {f.kind: f for f in load_schema().families["counters"].figures}
    mosaic_prefix, drift_table = figures["density_gallery"].get("prefix"), figures["drift"].get("table")

    con = connect_readonly(db)
    cells = con.execute("SELECT run_id, model, task FROM runs WHERE family = 'counters' AND NOT is_sweep").df()
    con.close()
    view = {}
    for run_id, model, task in cells.itertuples(index=False):
        files = data.artifacts([run_id], mosaic_prefix)
        images = {}
        for path in files.path:
            local = data.artifact_file(run_id, path)
            assert local is not None, f"{path} of {model}/{task} listed but not readable"
            images[path] = hashlib.sha256(local.read_bytes()).hexdigest()
        drift = data.read_table(run_id, drift_table)
        view[(model, task)] = (images, drift)
    return view


def test_index_and_leaderboard_show_the_same_artifacts_as_a_local_store(mlflow_server, tmp_path, monkeypatch):
    grid = ["-m", "model=oracle,class_blind", "dataset=synthetic_shapes", "task=praco_negative,praco_mosaic",
            "max_samples=6"]
    run_sweep(grid, tmp_path)
    run_sweep([*grid, *to_server(mlflow_server.url, "praco")], tmp_path,
              env=sweep_env(tmp_path, COUNTBOARD_OUTPUTS=str(tmp_path / "out2")))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    local_db, server_db = tmp_path / "local.duckdb", tmp_path / "server.duckdb"
    assert cli_main(["index", "--store", str(tmp_path / "mlruns"), "--db", str(local_db)]) == 0
    assert cli_main(["index", "--store", mlflow_server.url, "--db", str(server_db)]) == 0
    con = connect_readonly(server_db)
    unlisted = con.execute("SELECT count(*) FROM runs WHERE fingerprint = ''").fetchone()[0]
    n_files = con.execute("SELECT count(*) FROM artifacts a JOIN runs r USING (run_id) "
                          "WHERE r.family = 'counters'").fetchone()[0]
    con.close()
    assert unlisted == 0 and n_files > 0

    local, remote = _leaderboard_view(local_db, monkeypatch), _leaderboard_view(server_db, monkeypatch)
    assert set(local) == set(remote) == {(m, t) for m in ("oracle", "class_blind")
                                         for t in ("praco_negative", "praco_mosaic")}
    mosaics = 0
    for cell, (images, drift) in local.items():
        r_images, r_drift = remote[cell]
        assert r_images == images, cell  # same files, same bytes
        mosaics += len(images)
        assert (drift is None) == (r_drift is None), cell
        if drift is not None:
            pd.testing.assert_frame_equal(drift.reset_index(drop=True), r_drift.reset_index(drop=True))
    assert mosaics > 0 and any(d is not None for _, d in local.values())
    assert list((server_db.parent / "artifact_cache").rglob("*.png"))  # downloaded once, kept beside the index
    assert len(store_runs(tmp_path / "mlruns")) == 5
