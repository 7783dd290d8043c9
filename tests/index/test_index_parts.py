"""Identifier quoting, the artifact path resolver, store and index locations, and the CLI wiring."""

from __future__ import annotations

import os

import pytest

from countboard.cli import build_parser
from countboard.commands.leaderboard import leaderboard_command
from countboard.index import ddl
from countboard.index.artifacts import ArtifactPathError, artifact_root, resolve_artifact
from countboard.tracking.address import resolve


@pytest.mark.parametrize("bad", ["x; DROP TABLE runs", "a\"b", "A", "1x", "", "a-b", "cnt f1", "é"])
def test_quote_identifier_refuses_anything_but_snake_case(bad):
    with pytest.raises(ValueError, match="snake_case"):
        ddl.quote_identifier(bad)
    with pytest.raises(ValueError):
        ddl.family_table_sql("counters", [bad], "pivoted")


def test_view_sql_quotes_keys():
    sql = ddl.family_table_sql("counters", ["cnt_f1", "mae"], "pivoted")
    assert "p.m0 AS \"cnt_f1\"" in sql and "p.m1 AS \"mae\"" in sql and "r.family = 'counters'" in sql
    with pytest.raises(ValueError, match="name of an index table"):
        ddl.view_name("runs")


def test_resolver_stays_inside_the_artifact_directory(tmp_path):
    root = tmp_path / "store" / "artifacts" / "1" / "r" / "artifacts"
    (root / "tables").mkdir(parents=True)
    (root / "tables" / "x.parquet").write_bytes(b"x")
    (tmp_path / "secret.txt").write_text("s")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    uri = root.as_uri()
    assert resolve_artifact(uri, "tables/x.parquet") == (root / "tables" / "x.parquet").resolve()
    for bad in ("../../../../secret.txt", "/etc/passwd", "tables/../../x", "link.txt", "a\x00b", "", "..\\x"):
        with pytest.raises(ArtifactPathError):
            resolve_artifact(uri, bad)


def test_remote_artifacts_are_refused():
    for uri in ("s3://bucket/x", "mlflow-artifacts:/1/r/artifacts", "file://otherhost/x", "relative/path"):
        with pytest.raises(ArtifactPathError):
            artifact_root(uri)


def test_store_and_index_locations(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("COUNTBOARD_INDEX_DB", raising=False)
    assert resolve(str(tmp_path)).uri == f"sqlite:///{tmp_path}/mlflow.db"
    assert resolve(str(tmp_path / "x.db")).uri == f"sqlite:///{tmp_path}/x.db"
    assert resolve("http://h:5000").uri == "http://h:5000"
    assert resolve(f"sqlite:///{tmp_path}/mlflow.db").index_path() == tmp_path / "index.duckdb"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    remote = resolve("http://h:5000").index_path()
    assert remote.parent.parent == tmp_path / "cache" / "countboard" and remote.name == "index.duckdb"
    assert remote.parent.name.startswith("h_5000-") and remote != resolve("http://h:5001").index_path()
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(tmp_path / "elsewhere.duckdb"))
    assert resolve("http://h:5000").index_path() == tmp_path / "elsewhere.duckdb"


def test_cli_parses_index_and_leaderboard(tmp_path):
    parser = build_parser()
    args = parser.parse_args(["index", "--store", str(tmp_path), "--full"])
    assert args.full and args.func.__module__ == "countboard.commands.index"
    args = parser.parse_args(["leaderboard", "--db", str(tmp_path / "i.duckdb")])
    assert args.host == "127.0.0.1" and args.func.__module__ == "countboard.commands.leaderboard"
    cmd = leaderboard_command(tmp_path / "i.duckdb", args.host, args.port)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[-2:] == ["--db", str(tmp_path / "i.duckdb")]


def test_index_of_a_store_that_does_not_exist_is_an_error(tmp_path, capsys):
    from countboard.cli import main

    assert main(["index", "--store", str(tmp_path / "typo")]) == 2
    assert "no MLflow store at" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()
