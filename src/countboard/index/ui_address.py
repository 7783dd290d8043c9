"""Where the MLflow UI listens: one setting read by ``countboard mlflow-ui`` (to bind) and the leaderboard (to link).

``$COUNTBOARD_MLFLOW_UI`` (a base URL such as ``http://127.0.0.1:5001``), else ``http://127.0.0.1:5000``. No
mlflow import here: the leaderboard reads it.
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote, urlparse

UI_ENV = "COUNTBOARD_MLFLOW_UI"
DEFAULT_UI = "http://127.0.0.1:5000"


def mlflow_ui_url() -> str:
    """The UI's base URL, without a trailing slash."""
    return (os.environ.get(UI_ENV) or DEFAULT_UI).rstrip("/")


def store_ui(store_uri: str) -> str:
    """The MLflow UI of a store when nothing is set: an http(s) store serves its own UI; a local one is shown by
    ``countboard mlflow-ui`` at the default address.

    Example:
        >>> store_ui("http://10.1.2.3:5000/"), store_ui("sqlite:////x/mlflow.db")
        ('http://10.1.2.3:5000', 'http://127.0.0.1:5000')
    """
    from countboard.tracking.address import parse

    return parse(store_uri).http_url or DEFAULT_UI


def mlflow_ui_host_port() -> tuple[str, int]:
    """Host and port to bind ``countboard mlflow-ui`` to, from the same setting.

    Example:
        >>> mlflow_ui_host_port()  # doctest: +SKIP
        ('127.0.0.1', 5000)
    """
    parsed = urlparse(mlflow_ui_url())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"${UI_ENV}={mlflow_ui_url()!r} is not an http(s) URL; set it like {DEFAULT_UI}")
    return parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)


#: The MLflow UI (3.x) shows experiments and runs as classic ML runs with this in the URL, GenAI ones otherwise
#: (``countboard.tracking.mlflow_ui`` explains).
CLASSIC_VIEW = "workflowType=machine_learning"


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """Link to a run's page in the MLflow UI at ``base``, in the UI's classic (machine learning) view.

    Example:
        >>> run_url("http://h:5000", "1", "r")
        'http://h:5000/#/experiments/1/runs/r?workflowType=machine_learning'
    """
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{CLASSIC_VIEW}"


def compare_url(base: str, run_ids: list[str], experiment_ids: list[str]) -> str:
    """Link to the MLflow UI's side-by-side comparison of ``run_ids``.

    Example:
        >>> compare_url("http://h:5000", ["a", "b"], ["1"])
        'http://h:5000/#/compare-runs?runs=%5B%22a%22%2C%22b%22%5D&experiments=%5B%221%22%5D'
    """
    runs = quote(json.dumps(list(run_ids), separators=(",", ":")), safe="")
    exps = quote(json.dumps(sorted(set(experiment_ids)), separators=(",", ":")), safe="")
    return f"{base}/#/compare-runs?runs={runs}&experiments={exps}"
