"""The MLflow UI server, opening experiments in its classic runs table instead of the GenAI overview.

What decides the view, read from MLflow 3.17's UI bundle (``mlflow/server/js/build/static/js/main.*.js``): the
experiment page takes its kind from the UI's *workflow type* (the "GenAI apps & agents" / "Machine learning"
switch at the top of the side bar) whenever the feature flag for it is on, and in 3.17 that flag is hard-wired on;
the ``mlflow.experimentKind`` experiment tag is then not consulted at all. The workflow type is the URL's
``workflowType`` query parameter (``genai`` or ``machine_learning``) when present, else the browser's
``localStorage["mlflow.workflowType_v1"]`` (set when the user flips the switch), else ``genai``. There is no
server flag. So every experiment, tagged or not (the Default experiment included), opens in the GenAI overview in a
browser that never flipped the switch.

This module serves MLflow's own app (``mlflow.server.fastapi_app``) with one change: the page that boots the UI
(``index.html``) first stores ``"machine_learning"`` as the workflow type when the browser holds none, so the
UI opens on the runs table, and a reader's own choice of the switch is kept. ``python -m
countboard.tracking.mlflow_ui <mlflow server options>`` runs ``mlflow server`` with this app in place of MLflow's.
Experiments still carry ``mlflow.experimentKind=custom_model_development`` (``store.EXPERIMENT_KIND``), which
MLflow versions that read the tag use.
"""

from __future__ import annotations

import json
import sys

WORKFLOW_PARAM = "workflowType"
CLASSIC_WORKFLOW = "machine_learning"
WORKFLOW_STORAGE_KEY = "mlflow.workflowType_v1"  # the UI's useLocalStorage key ``mlflow.workflowType``, version 1
APP = "countboard.tracking.mlflow_ui:app"
_MLFLOW_APP = "mlflow.server.fastapi_app:app"
_KEY, _VALUE = json.dumps(WORKFLOW_STORAGE_KEY), json.dumps(json.dumps(CLASSIC_WORKFLOW))
_BOOT = f"<script>try{{if(localStorage.getItem({_KEY})===null){{localStorage.setItem({_KEY},{_VALUE})}}}}catch(e){{}}</script>"


def classic_index(html: str) -> str:
    """``index.html`` with the script that makes the classic view the default, before the UI's own scripts.

    Example:
        >>> classic_index("<html><head><script src=a.js></script></head></html>").count("localStorage.setItem")
        1
    """
    at = html.find("<script")
    if at < 0:
        at = html.find("</head>")
    return html + _BOOT if at < 0 else html[:at] + _BOOT + html[at:]


def _classic_flask_app():
    """MLflow's Flask app, its ``index.html`` route serving ``classic_index`` of the bundled page."""
    import os

    from flask import Response
    from mlflow.server import app as flask_app

    view = flask_app.view_functions.get("serve")
    if view is None:
        raise RuntimeError("this MLflow has no `serve` route for index.html; start `mlflow server` instead")
    page = os.path.join(flask_app.static_folder, "index.html")

    def serve():
        if not os.path.exists(page):
            return view()
        with open(page, encoding="utf-8") as fh:
            return Response(classic_index(fh.read()), mimetype="text/html")

    flask_app.view_functions["serve"] = serve
    return flask_app


def __getattr__(name: str):
    """``app``: the ASGI app the server workers load (built on first access, in the worker)."""
    if name == "app":
        _classic_flask_app()
        from mlflow.server.fastapi_app import app

        globals()["app"] = app
        return app
    raise AttributeError(name)


def main(argv: list[str] | None = None) -> int:
    """``mlflow server`` with its uvicorn workers loading ``APP`` instead of MLflow's app."""
    import mlflow.server as server
    from mlflow.cli import cli

    build = getattr(server, "_build_uvicorn_command", None)
    if build is None:
        raise SystemExit("this MLflow builds its server command differently; run `mlflow server` instead "
                         "(experiments then open in the GenAI overview: flip the side bar's switch)")

    def with_classic_app(*args, **kwargs):
        args = tuple(APP if a == _MLFLOW_APP else a for a in args)
        kwargs = {k: APP if v == _MLFLOW_APP else v for k, v in kwargs.items()}
        return build(*args, **kwargs)

    server._build_uvicorn_command = with_classic_app
    argv = sys.argv[1:] if argv is None else argv
    return cli.main(["server", *argv], prog_name="mlflow", standalone_mode=True)


if __name__ == "__main__":
    sys.exit(main())
