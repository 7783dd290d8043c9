"""The tracking layer against a real SQLite store in tmp_path."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from countboard.errors import ConfigError
from countboard.tracking import store as st
from countboard.tracking import tags as tg
from countboard.tracking import tracker_from_config


@pytest.fixture
def tracker(tmp_path):
    return tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(tmp_path / "mlruns")}))


def test_local_store_layout_and_wal(tracker, tmp_path):
    import sqlite3

    tracker.check()
    exp = tracker.experiment_id("exp")
    assert tracker.experiment_id("exp") == exp
    assert tracker.uri == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    assert tracker.client.get_experiment(exp).artifact_location == (tmp_path / "mlruns" / "artifacts" / "exp").as_uri()
    with sqlite3.connect(tmp_path / "mlruns" / "mlflow.db") as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_find_runs_by_tags_and_status(tracker):
    exp = tracker.experiment_id("exp")
    a = tracker.create_run(exp, "a", {"config_hash": "h1", "model": "m"})
    b = tracker.create_run(exp, "b", {"config_hash": "h1", "model": "it's"})
    tracker.set_status(a, st.FINISHED)
    assert {r.run_id for r in tracker.find_runs(exp, {"config_hash": "h1"})} == {a, b}
    assert [r.run_id for r in tracker.find_runs(exp, {"config_hash": "h1"}, [st.FINISHED])] == [a]
    assert [r.run_id for r in tracker.find_runs(exp, {"config_hash": "h1"}, [st.RUNNING, st.FAILED])] == [b]
    assert [r.run_id for r in tracker.find_runs(exp, {"model": "it's"})] == [b]  # quotes are escaped


def test_log_complete_run_skips_a_repeated_import(tracker, tmp_path):
    art = tmp_path / "art"
    art.mkdir()
    (art / "table.txt").write_text("x")
    tags = {"config_hash": "abc", "model": "m"}
    run_id = tracker.log_complete_run("exp", "import", tags, params={"a": 1}, metrics={"n_samples": 3.0},
                                      artifacts_dir=art)
    assert run_id and tracker.get_status(run_id) == st.FINISHED
    assert tracker.list_artifacts(run_id) == ["table.txt"]
    assert tracker.log_complete_run("exp", "import", tags) is None
    assert tracker.log_complete_run("exp", "import", tags, force=True) not in (None, run_id)
    with pytest.raises(ValueError, match="config_hash"):
        tracker.log_complete_run("exp", "import", {"model": "m"})


def test_params_of_a_resumed_run_are_not_logged_twice(tracker):
    exp = tracker.experiment_id("exp")
    run = tracker.create_run(exp, "r", {"config_hash": "h"})
    tracker.log_params(run, {"a": 1, "b": "x"})
    tracker.log_params(run, {"a": 1, "c": 2.5})  # MLflow refuses changing a param; unchanged ones are skipped
    assert tracker.client.get_run(run).data.params == {"a": "1", "b": "x", "c": "2.5"}


def test_server_tracking_needs_a_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI"):
        tracker_from_config(OmegaConf.create({"kind": "server", "uri": None}))
    with pytest.raises(ConfigError, match="local, server"):
        tracker_from_config(OmegaConf.create({"kind": "cloud"}))


def test_retry_gives_up_on_other_errors_and_retries_locks():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert st._retry(flaky, "test") == "ok" and len(calls) == 3
    with pytest.raises(KeyError):
        st._retry(lambda: (_ for _ in ()).throw(KeyError("x")), "test")


def test_mlflow_ui_serves_the_sweep_store_on_loopback(monkeypatch, tmp_path, capsys):
    from countboard.cli import main
    from countboard.commands import mlflow_ui as commands

    calls = []
    monkeypatch.setattr(commands, "serve", lambda cmd: calls.append(cmd) or 0)
    assert main(["mlflow-ui", "--store", str(tmp_path / "mlruns"), "--port", "5123"]) == 2  # no store yet
    assert "no MLflow store at" in capsys.readouterr().err and not calls
    tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(tmp_path / "mlruns")}))
    assert main(["mlflow-ui", "--store", str(tmp_path / "mlruns"), "--port", "5123"]) == 0
    cmd = calls[0]
    assert cmd[1:3] == ["-m", "countboard.tracking.mlflow_ui"]  # `mlflow server`, the UI in its classic view
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "5123"
    assert cmd[cmd.index("--backend-store-uri") + 1] == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"


def test_experiments_are_classic_ml_experiments_inside_the_store(tracker, tmp_path):
    exp = tracker.experiment_id("countboard")
    assert tracker.client.get_experiment(exp).tags[tg.EXPERIMENT_KIND] == "custom_model_development"
    with pytest.raises(ConfigError, match="not a valid name"):
        tracker.experiment_id("../../x")
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()
    run = tracker.create_run(exp, "a/../b", {})  # run names never enter paths: cleaned, not refused
    name = tracker.client.get_run(run).info.run_name
    assert "/" not in name and ".." not in name


def test_errors_are_one_line_unless_debug(tmp_path, capsys, monkeypatch):
    from countboard.cli import main
    from countboard.errors import TrackingStoreError

    monkeypatch.setenv("COUNTBOARD_DEBUG", "0")  # restored after the test: --debug sets it
    assert main(["index", "--store", str(tmp_path / "typo")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and str(tmp_path / "typo") in err
    with pytest.raises(TrackingStoreError):
        main(["--debug", "index", "--store", str(tmp_path / "typo")])
    monkeypatch.setenv("COUNTBOARD_DEBUG", "1")
    with pytest.raises(TrackingStoreError):
        main(["index", "--store", str(tmp_path / "typo")])


def test_user_message_names_the_file():
    import zipfile

    from countboard.errors import user_message

    assert user_message(FileNotFoundError(2, "No such file or directory", "/d/x.csv")) == \
        "No such file or directory: /d/x.csv (FileNotFoundError)"
    assert "zip" in user_message(zipfile.BadZipFile("File is not a zip file"))
    assert user_message(KeyError("bug")) is None  # a bug keeps its traceback


def test_a_store_that_answers_then_fails_is_named_without_its_password(monkeypatch):
    """A database server that answers the probe but refuses the login: the line names the store, not the password."""
    uri = "postgresql://alice:s3cret@127.0.0.1:5432/runs"
    monkeypatch.setattr(st, "reach", lambda *a, **k: None)

    class Refusing:
        def search_experiments(self, **kwargs):
            raise RuntimeError(f"(OperationalError) login failed for {uri}\nmore detail")

    tracker = st.Tracker(uri)
    tracker._client = Refusing()
    monkeypatch.setattr(st, "_retry", lambda fn, what: fn())
    with pytest.raises(st.TrackingStoreError) as caught:
        tracker.check()
    text = str(caught.value)
    assert "s3cret" not in text and "\n" not in text
    assert text.startswith("cannot use the MLflow tracking store postgresql://alice:***@127.0.0.1:5432/runs: ")
