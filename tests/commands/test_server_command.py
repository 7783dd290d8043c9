"""``countboard server``: the mlflow command it runs, its checks of the backend URI (the real server runs in
tests/integration)."""

from __future__ import annotations

import pytest

from countboard.cli import build_parser, main
from countboard.commands.server import check_backend, server_command
from countboard.errors import ConfigError


def test_server_binds_loopback_and_proxies_artifacts(tmp_path):
    args = build_parser().parse_args(["server", "--backend-store-uri", "postgresql://u:pw@db:5432/mlflow",
                                      "--artifacts-destination", str(tmp_path / "art")])
    cmd = server_command(args)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and "--serve-artifacts" in cmd
    assert cmd[cmd.index("--artifacts-destination") + 1] == str((tmp_path / "art").resolve())
    assert (tmp_path / "art").is_dir()
    args = build_parser().parse_args(["server", "--backend-store-uri", "sqlite:///x.db", "--artifacts-destination",
                                      "s3://bucket/mlflow", "--host", "0.0.0.0", "--allowed-hosts", "h:5000"])
    cmd = server_command(args)
    assert cmd[cmd.index("--artifacts-destination") + 1] == "s3://bucket/mlflow"
    assert cmd[cmd.index("--allowed-hosts") + 1] == "h:5000"


def test_backend_uri_and_driver_are_checked(monkeypatch):
    for bad in ("http://h:5000", "/tmp/mlruns", "mongodb://h/db"):
        with pytest.raises(ConfigError, match="database URI"):
            check_backend(bad)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "psycopg" else real(name, *a))
    with pytest.raises(ConfigError, match=r"countboard\[server\]"):
        check_backend("postgresql://u@h/db")


def test_dry_run_prints_the_command_and_hides_the_password(capsys, tmp_path):
    assert main(["server", "--backend-store-uri", "sqlite:///x.db", "--artifacts-destination", str(tmp_path),
                 "--dry-run"]) == 0
    assert main(["server", "--backend-store-uri", "postgresql://u:secret@h/db", "--artifacts-destination",
                 str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-m mlflow server" in out and "u:***@h/db" in out and "secret" not in out
