"""``countboard leaderboard``: Streamlit's security settings on the command line, one MLflow UI address."""

from __future__ import annotations

import json
import socket

from countboard.cli import build_parser
from countboard.commands.leaderboard import STREAMLIT_SETTINGS, leaderboard_command
from countboard.index import ui_address


def test_streamlit_settings_are_passed_explicitly(tmp_path):
    cmd = leaderboard_command(tmp_path / "i.duckdb", "127.0.0.1", 8600)
    opts = dict(zip(cmd[::1], cmd[1::1], strict=False))
    assert opts["--server.address"] == "127.0.0.1" and opts["--server.port"] == "8600"
    for key in ("server.enableXsrfProtection", "server.enableCORS"):
        assert opts[f"--{key}"] == "true"
    assert opts["--browser.gatherUsageStats"] == "false" and opts["--client.showErrorDetails"] == "false"
    assert set(STREAMLIT_SETTINGS) <= {k.removeprefix("--") for k in opts}
    assert cmd[-2:] == ["--db", str(tmp_path / "i.duckdb")]


def test_one_address_for_the_mlflow_ui(monkeypatch):
    monkeypatch.setenv(ui_address.UI_ENV, "http://127.0.0.1:5123/")
    args = build_parser().parse_args(["mlflow-ui"])
    assert (args.host, args.port) == ("127.0.0.1", 5123)
    assert ui_address.run_url(ui_address.mlflow_ui_url(), "1", "r") == \
        "http://127.0.0.1:5123/#/experiments/1/runs/r?workflowType=machine_learning"
    monkeypatch.delenv(ui_address.UI_ENV)
    args = build_parser().parse_args(["mlflow-ui"])
    assert (args.host, args.port) == ("127.0.0.1", 5000)


def test_a_running_mlflow_ui_is_followed_while_it_lives(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv(ui_address.UI_ENV, "http://127.0.0.1:5123")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert ui_address.ui_for(uri) == ("http://127.0.0.1:5123", f"${ui_address.UI_ENV}")
    path = ui_address.record_served(uri, ui_address.served_url("0.0.0.0", 5601))
    assert path == tmp_path / ui_address.SERVED_FILE
    assert ui_address.ui_for(uri) == ("http://127.0.0.1:5601", "served by countboard mlflow-ui")
    ui_address.forget_served(uri)
    assert not path.exists() and ui_address.served_ui(uri) is None
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path.write_text(json.dumps({"url": "http://127.0.0.1:5601", "pid": int(gone.stdout), "host": socket.gethostname()}))
    assert ui_address.served_ui(uri) is None  # its process is gone: the setting again
    path.write_text("{not json")
    assert ui_address.ui_for(uri)[0] == "http://127.0.0.1:5123"
    monkeypatch.delenv(ui_address.UI_ENV)
    assert ui_address.ui_for(uri) == (ui_address.DEFAULT_UI, "default")
    assert ui_address.served_url("::1", 80) == "http://[::1]:80"
