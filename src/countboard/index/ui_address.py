"""Where the MLflow UI listens: read by ``countboard mlflow-ui`` (to bind) and the leaderboard (to link).

``countboard mlflow-ui`` records the address it serves a store at (``mlflow-ui.json`` in the store's cache
folder, with its process id) and removes it when it stops; the leaderboard links to that address while that
process lives, so ``countboard mlflow-ui --port 5601`` and ``countboard leaderboard`` agree without the address
being given twice. Otherwise both use ``$COUNTBOARD_MLFLOW_UI`` (a base URL such as ``http://127.0.0.1:5001``),
else the store's own UI (a server store) or ``http://127.0.0.1:5000``. No mlflow import here: the leaderboard
reads it.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import quote, urlparse

from countboard.processes import pid_alive

UI_ENV = "COUNTBOARD_MLFLOW_UI"
DEFAULT_UI = "http://127.0.0.1:5000"
#: The file in a store's cache folder (``StoreAddress.cache_dir``) naming the UI that serves it now.
SERVED_FILE = "mlflow-ui.json"
_ANY_ADDRESS = {"0.0.0.0", "::", ""}


def _served_file(store_uri: str) -> Path:
    from countboard.tracking.address import parse

    return parse(store_uri).cache_dir() / SERVED_FILE


def served_url(host: str, port: int) -> str:
    """The address a browser on this machine reaches a server bound to ``host:port`` at.

    Example:
        >>> served_url("0.0.0.0", 5601)
        'http://127.0.0.1:5601'
    """
    host = "127.0.0.1" if host in _ANY_ADDRESS else host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def record_served(store_uri: str, url: str) -> Path:
    """Record that this process serves the MLflow UI of ``store_uri`` at ``url``; returns the file."""
    path = _served_file(store_uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"url": url.rstrip("/"), "pid": os.getpid(), "host": socket.gethostname()}))
    tmp.replace(path)
    return path


def forget_served(store_uri: str) -> None:
    """Remove this process's record (another process's newer record is kept)."""
    path = _served_file(store_uri)
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def served_ui(store_uri: str) -> str | None:
    """The address a running ``countboard mlflow-ui`` of this machine serves ``store_uri`` at, else None (no
    record, an unreadable one, or its process is gone)."""
    try:
        record = json.loads(_served_file(store_uri).read_text())
        url, pid = str(record["url"]), int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.get("host") != socket.gethostname() or not pid_alive(pid):
        return None
    return url


def ui_for(store_uri: str | None) -> tuple[str, str]:
    """The MLflow UI the leaderboard links to, and why there: the running ``countboard mlflow-ui`` of the store,
    else ``$COUNTBOARD_MLFLOW_UI``, else the store's own (``store_ui``)."""
    served = served_ui(store_uri) if store_uri else None
    if served:
        return served, "served by countboard mlflow-ui"
    if os.environ.get(UI_ENV):
        return mlflow_ui_url(), f"${UI_ENV}"
    return (store_ui(store_uri) if store_uri else DEFAULT_UI), "default"


def answers(url: str, timeout_s: float = 1.0) -> bool:
    """Whether an HTTP server answers at ``url`` (any status counts: the UI's ``/health``)."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


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
