"""The MLflow UI opens the project's experiments in its classic runs table (``countboard.tracking.mlflow_ui``)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from countboard.tracking.mlflow_ui import CLASSIC_WORKFLOW, WORKFLOW_STORAGE_KEY, classic_index
from countboard.tracking.store import Tracker
from countboard.tracking.tags import EXPERIMENT_KIND as EXPERIMENT_KIND_TAG
from countboard.tracking.tags import EXPERIMENT_KIND_ML as EXPERIMENT_KIND
from tests.fixtures.browser import MISSING, Watched, browser
from tests.fixtures.synthetic_store import FamilySpec, local_store, make_store

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "mlflow_ui"


def test_index_page_defaults_to_the_classic_view_before_the_ui_boots():
    page = '<html><head><title>MLflow</title><script defer src="main.js"></script></head><body></body></html>'
    out = classic_index(page)
    boot = out.index(WORKFLOW_STORAGE_KEY)
    assert boot < out.index('src="main.js"')
    assert f'\\"{CLASSIC_WORKFLOW}\\"' in out  # stored as the UI stores it: a JSON string
    assert "===null" in out  # a reader who flipped the switch keeps the choice
    assert out.replace(out[out.index("<script>try"):out.index("</script>") + 9], "") == page


def test_default_experiment_gets_the_classic_kind(tmp_path):
    from mlflow.tracking import MlflowClient

    uri, _ = local_store(tmp_path)
    assert EXPERIMENT_KIND_TAG not in MlflowClient(tracking_uri=uri).get_experiment("0").tags
    Tracker(uri).mark_default_experiment()
    assert MlflowClient(tracking_uri=uri).get_experiment("0").tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    client = MlflowClient(tracking_uri=uri)
    client.set_experiment_tag("0", EXPERIMENT_KIND_TAG, "genai_development")
    Tracker(uri).mark_default_experiment()  # a kind someone chose is kept
    assert client.get_experiment("0").tags[EXPERIMENT_KIND_TAG] == "genai_development"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _open_experiment(base: str, name: str, shot: Path) -> dict:
    """Open the UI's home page in a fresh browser profile, click experiment ``name``, wait for its runs, open the
    runs table's column chooser (a screenshot of the page as it was, ``<shot>-failure.png``, when a step fails)."""
    with browser() as b:
        watched = Watched(b, width=1280, height=1600)
        page = watched.page
        with watched.shot_on_failure(shot.with_name(f"{shot.stem}-failure.png")):
            page.goto(base + "/")
            link = page.locator("a").filter(has_text=re.compile(rf"^\s*{re.escape(name)}\s*$"))
            link.first.wait_for(timeout=120_000)
            link.first.click()
            page.wait_for_function("document.body.innerText.includes('Run Name') && "
                                   "document.body.innerText.includes('matching runs')", timeout=120_000)
            page.wait_for_timeout(500)
            seen = {"url": page.url, "text": page.inner_text("body")}
            # the table's columns are drawn as they scroll into view: its column chooser lists every metric column
            button = page.locator("button").filter(has_text=re.compile(r"^\s*Columns\s*$"))
            button.first.wait_for(timeout=60_000)
            button.first.click()
            page.wait_for_function("document.body.innerText.includes('Metrics')", timeout=60_000)
            page.wait_for_timeout(500)
            seen["columns"] = page.inner_text("body")
            watched.screenshot(shot)
            return seen


@pytest.mark.slow
@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_mlflow_ui_opens_an_experiment_on_its_runs_table(tmp_path):
    counters = FamilySpec("counters", {"cnt_f1": True, "mae": False}, models=["owl_a", "owl_b"], datasets=["fsc147"])
    numeracy = FamilySpec("generators", {"numeracy_accuracy": True}, models=["sd"], datasets=["geckonum"])
    store = make_store(tmp_path / "store", [counters], seed=3, with_artifacts=False, experiment="countboard/counters")
    make_store(tmp_path / "store", [numeracy], seed=4, with_artifacts=False, experiment="countboard/numeracy")
    port = _free_port()
    log = tmp_path / "mlflow-ui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "countboard.cli", "mlflow-ui", "--store", str(tmp_path / "store"),
                                 "--host", "127.0.0.1", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ}, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300  # MLflow's server imports take a minute on a loaded machine
        while True:
            try:
                if urllib.request.urlopen(f"{base}/health", timeout=5).status == 200:
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"the MLflow UI did not come up:\n{log.read_text()[-3000:]}") from None
                time.sleep(1)
        seen = _open_experiment(base, "countboard/counters", ARTIFACTS / "experiment.png")
    finally:
        proc.terminate()
        proc.wait(30)
    assert "/experiments/" in seen["url"] and "/runs" in seen["url"], seen["url"]
    assert "Run Name" in seen["text"] and "sweep-counters" in seen["text"], seen["text"][:2000]
    assert f"{len(store.run_ids) + 1} matching runs" in seen["text"]  # the sweep and its 2 cells
    # one family per experiment: the counters' metrics are its columns, the numeracy runs and metrics are not there
    assert "cnt_f1" in seen["columns"] and "mae" in seen["columns"], seen["columns"][-2000:]
    assert "numeracy_accuracy" not in seen["columns"] and "sweep-generators" not in seen["text"]
    # the GenAI overview's own words are absent
    assert "Detect Issues" not in seen["text"] and "Evaluation runs" not in seen["text"]
    from mlflow.tracking import MlflowClient

    tags = MlflowClient(tracking_uri=store.uri).get_experiment("0").tags
    assert tags.get(EXPERIMENT_KIND_TAG) == EXPERIMENT_KIND  # `countboard mlflow-ui` marked the Default one


def test_new_local_stores_have_a_classic_default_experiment(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from countboard.tracking.local_store import ensure_local_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the first store is built, the second copied
    for name in ("built", "copied"):
        db = ensure_local_store(tmp_path / name)
        tags = MlflowClient(tracking_uri=f"sqlite:///{db}").get_experiment("0").tags
        assert tags.get(EXPERIMENT_KIND_TAG) == EXPERIMENT_KIND, name
    assert (tmp_path / "cache" / "countboard").is_dir()
