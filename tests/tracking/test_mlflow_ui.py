"""The MLflow UI opens the project's experiments in its classic runs table (``countboard.tracking.mlflow_ui``)."""

from __future__ import annotations

import asyncio
import os
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
from tests.fixtures.chromium import CHROMIUM, Chromium
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


async def _open_experiment(base: str, name: str, shot: Path) -> dict:
    """Open the UI's home page in a fresh browser profile, click experiment ``name``, wait for its runs."""
    async with Chromium() as page:
        await page.goto(base + "/")
        link = f"Array.from(document.querySelectorAll('a')).find(a => a.innerText.trim() === {name!r})"
        assert await page.wait_for(f"!!{link}", 120), "no experiment link on the MLflow UI's home page"
        await page.evaluate(f"{link}.click()")
        await page.wait_for("document.body.innerText.includes('Run Name') && "
                            "document.body.innerText.includes('matching runs')", 120)
        await asyncio.sleep(0.5)
        seen = {"url": await page.evaluate("location.href"), "text": await page.evaluate("document.body.innerText")}
        # the table's columns are drawn as they scroll into view: its column chooser lists every metric column
        button = "Array.from(document.querySelectorAll('button')).find(b => b.innerText.trim() === 'Columns')"
        assert await page.wait_for(f"!!{button}", 60), "no Columns button on the runs table"
        await page.evaluate(f"{button}.click()")
        await page.wait_for("document.body.innerText.includes('Metrics')", 60)
        await asyncio.sleep(0.5)
        seen["columns"] = await page.evaluate("document.body.innerText")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(shot)
        return seen


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs the Debian package `chromium` (apt-get install -y chromium)")
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
        seen = asyncio.run(_open_experiment(base, "countboard/counters", ARTIFACTS / "experiment.png"))
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
