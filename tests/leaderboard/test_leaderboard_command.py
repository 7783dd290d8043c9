"""``countboard leaderboard``: Streamlit's security settings on the command line, one MLflow UI address."""

from __future__ import annotations

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
