"""The store address: every form a user may give, parsed once, and the same folder wherever it is read."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from countboard.tracking import address
from countboard.tracking.address import parse, resolve, sqlite_uri


def test_a_folder_is_an_embedded_store(tmp_path):
    a = parse(str(tmp_path / "runs"))
    assert a.uri == f"sqlite:///{tmp_path}/runs/mlflow.db"
    assert a.folder == tmp_path / "runs" and a.db == tmp_path / "runs" / "mlflow.db"
    assert a.artifact_root == (tmp_path / "runs" / "artifacts").as_uri() and a.is_embedded and a.is_local
    assert a.given == str(tmp_path / "runs") and a.http_url is None


def test_relative_and_home_folders_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert parse("mlruns").folder == tmp_path / "mlruns"
    assert parse("~/runs").folder == tmp_path / "home" / "runs"
    assert parse("sqlite:///rel/mlflow.db").folder == tmp_path / "rel"  # three slashes: relative to the cwd
    assert parse("sqlite:///rel/mlflow.db").uri == f"sqlite:///{tmp_path}/rel/mlflow.db"


def test_a_db_file_is_that_sqlite_file(tmp_path):
    a = parse(str(tmp_path / "x.db"))
    assert a.uri == f"sqlite:///{tmp_path}/x.db" and a.db == tmp_path / "x.db" and a.folder == tmp_path
    assert not a.is_embedded  # not the standard layout: never created by local_store


def test_sqlite_uris_plain_and_percent_quoted_name_one_folder(tmp_path):
    folder = tmp_path / "my store 100%"
    plain = parse(f"sqlite:///{folder}/mlflow.db")
    quoted = parse(f"sqlite:///{quote(str(folder))}/mlflow.db")
    given = parse(str(folder))
    assert plain.folder == quoted.folder == given.folder == folder
    assert plain.uri == quoted.uri == given.uri == "sqlite:///" + str(folder).replace("%", "%25") + "/mlflow.db"
    assert given.artifact_root == (folder / "artifacts").as_uri()  # file URIs are quoted: file:///…my%20store…
    assert parse(f"sqlite:///{folder}/mlflow.db?timeout=30").uri.endswith("/mlflow.db?timeout=30")


def test_sqlalchemy_reads_the_uri_back_as_the_same_file(tmp_path):
    from sqlalchemy.engine import make_url

    for name in ("my store", "100%", "a?b", "plain"):
        db = tmp_path / name / "mlflow.db"
        assert make_url(sqlite_uri(db)).database == str(db)
        assert parse(sqlite_uri(db)).db == db


def test_in_memory_sqlite_has_no_folder():
    for uri in ("sqlite://", "sqlite:///:memory:"):
        a = parse(uri)
        assert a.folder is None and a.db is None and a.uri == uri


def test_file_uris_are_the_file_store_folder(tmp_path, monkeypatch):
    folder = tmp_path / "file store"
    for uri in (folder.as_uri(), f"file:{quote(str(folder))}", f"file://localhost{quote(str(folder))}"):
        a = parse(uri)
        assert a.folder == folder and a.db is None and a.artifact_root is None and a.uri == folder.as_uri()
    monkeypatch.chdir(tmp_path)
    assert parse("file:rel").folder == tmp_path / "rel"
    assert parse("file://otherhost/x").folder is None  # another machine's folder is not ours


@pytest.mark.parametrize("uri", ["http://10.0.0.5:5000", "https://mlflow.example.org/",
                                 "postgresql://u:p@db:5432/mlflow", "mysql+pymysql://u@h/m"])
def test_remote_stores_have_no_folder(uri):
    a = parse(uri)
    assert a.uri == uri and a.folder is None and a.db is None and a.artifact_root is None
    assert not a.is_local and not a.read_only
    assert a.http_url == (uri.rstrip("/") if uri.startswith("http") else None)


def test_lookup_order_argument_then_environment_then_mlruns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {address.STORE_ENV: str(tmp_path / "a"), address.TRACKING_URI_ENV: "http://h:1"}
    assert resolve(str(tmp_path / "x"), env=env).folder == tmp_path / "x"
    assert resolve(None, env=env).folder == tmp_path / "a"
    assert resolve(None, env={address.TRACKING_URI_ENV: "http://h:1"}).uri == "http://h:1"
    assert resolve(None, env={}).folder == tmp_path / address.DEFAULT_STORE
    monkeypatch.setenv(address.STORE_ENV, "sqlite:///" + quote(str(tmp_path / "b c")) + "/mlflow.db")
    assert resolve().folder == tmp_path / "b c"  # the process environment by default
    with pytest.raises(ValueError, match="empty"):
        parse("  ")


def test_index_path_env_then_beside_the_store_then_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(address.INDEX_DB_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert parse(str(tmp_path / "s")).index_path() == tmp_path / "s" / "index.duckdb"
    remote = parse("http://h:5000").index_path()
    assert remote.parent.parent == tmp_path / "cache" / "countboard" and remote.parent.name.startswith("h_5000-")
    assert remote != parse("http://h:5001").index_path()
    assert parse("http://h:5000").index_path({address.INDEX_DB_ENV: "~/i.duckdb"}) == Path.home() / "i.duckdb"


def test_read_only_when_the_folder_or_database_is_not_writable(tmp_path, monkeypatch):
    a = parse(str(tmp_path / "s"))
    assert not a.read_only  # nothing there yet: creating it will say what is wrong
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "mlflow.db").touch()
    assert not a.read_only
    refused = {tmp_path / "s" / "mlflow.db"}
    monkeypatch.setattr(address.os, "access", lambda p, mode: Path(p) not in refused)
    assert a.read_only


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to any folder")
def test_read_only_folder_for_real(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s").chmod(0o555)
    try:
        assert parse(str(tmp_path / "s")).read_only
    finally:
        (tmp_path / "s").chmod(0o755)


def test_a_path_with_a_space_is_one_folder_for_every_command(tmp_path, monkeypatch):
    from countboard.commands.doctor import diagnose
    from countboard.commands.index import store_paths
    from countboard.tracking.store import open_store

    monkeypatch.delenv(address.INDEX_DB_ENV, raising=False)
    folder = tmp_path / "my store 100%"
    created = open_store(str(folder), create=True)
    created.experiment_id("exp")
    forms = [str(folder), str(folder / "mlflow.db"), f"sqlite:///{folder}/mlflow.db",
             f"sqlite:///{quote(str(folder))}/mlflow.db"]
    for form in forms:
        tracker = open_store(form)
        assert tracker.uri == created.uri and tracker.artifact_root == created.artifact_root
        assert store_paths(argparse.Namespace(store=form, db=None)) == (created.uri, folder / "index.duckdb")
        assert diagnose(form) == []  # doctor reads the same store (and finds it whole)
        assert address.local_folder(tracker.uri) == folder  # how the leaderboard reads the indexed store back
    # MLflow creates the parent of the URI's path unquoted: a quoted "%" leaves an empty folder "…%25" beside the
    # store (the store itself is where SQLAlchemy puts it); a space is never quoted and leaves nothing
    assert {p.name for p in tmp_path.iterdir()} <= {folder.name, "my store 100%25"}
    assert not any((tmp_path / "my store 100%25").iterdir())


def test_a_sweep_store_dir_takes_the_same_forms(tmp_path):
    from omegaconf import OmegaConf

    from countboard.tracking.store import open_store, tracker_from_config

    folder = tmp_path / "sweep store"
    quoted = f"sqlite:///{quote(str(folder))}/mlflow.db"
    swept = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": quoted}))
    assert swept.uri == open_store(str(folder)).uri == f"sqlite:///{folder}/mlflow.db"
    assert swept.artifact_root == (folder / "artifacts").as_uri() and (folder / "mlflow.db").is_file()
