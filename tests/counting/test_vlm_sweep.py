"""Real sweeps of model=vlm on a tiny random LLaVA folder: praco_negative and classic, and the same model as the
judge of geckonum_autoeval; parsed counts and raw answers in samples.parquet, unparsable answers as failures (kept,
with every scoring convention logged, by classic)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from countboard.models.answers import parse_count
from countboard.models.conventions import CONVENTION_KEYS
from countboard.models.tiny_asked import build_tiny_vlm
from tests.conftest import run_sweep, store_runs

SMALL = ["dataset.images_per_class={train:0,val:0,test:2}", "dataset.multi_class_images=0",
         "dataset.image_size=[48,48]", "dataset.n_classes=3"]


def _artifacts(store, run_id):
    return next(store.glob(f"artifacts/*/{run_id}/artifacts"))


@pytest.mark.slow
def test_vlm_sweeps_negative_classic_and_judges_geckonum(tmp_path):
    tiny = build_tiny_vlm(tmp_path / "tiny_llava", "llava")
    run_sweep(["-m", "model=vlm", f"model.model_id={tiny}", "model.max_new_tokens=4",
               "task=praco_negative,classic", "dataset=synthetic_shapes", *SMALL], tmp_path)
    run_sweep(["model=procedural_good", "dataset=shape_prompts", "task=geckonum_autoeval",
               "model@task.evaluator=vlm", f"task.evaluator.model_id={tiny}", "task.evaluator.max_new_tokens=4",
               "max_samples=6", "task.n_human=6", "task.bcc_draws=50"], tmp_path)
    store = tmp_path / "mlruns"
    cells = store_runs(store)
    cells = cells[cells["tags.countboard.role"] == "cell"].set_index("tags.task")
    assert set(cells["status"]) == {"FINISHED"} and len(cells) == 3
    for task in ("praco_negative", "classic", "geckonum_autoeval"):
        art = _artifacts(store, cells.loc[task, "run_id"])
        samples = pd.read_parquet(art / "samples.parquet") if (art / "samples.parquet").exists() else None
        failures = json.loads((art / "failures.json").read_text()) if (art / "failures.json").exists() else []
        assert all("unparsable answer" in f["error"] for f in failures), task
        if task == "praco_negative" and samples is not None:
            classes = list(pd.read_parquet(art / "tables" / "negative_counts.parquet").columns[3:])
            for counts, answers in zip(samples["counts"], samples["answers"], strict=True):
                assert list(counts) == [parse_count(a, c).count for a, c in zip(answers, classes, strict=True)]
        if task == "classic":  # every answer kept: the parsed count, or no count with the reason
            counts = samples["count"] if "count" in samples else pd.Series([None] * len(samples))
            assert all(parse_count(a, c).count == n if pd.notna(n) else parse_count(a, c).count is None
                       for a, c, n in zip(samples["answer"], samples["class_name"], counts, strict=True))
            assert not failures
            logged = cells.loc[task].filter(like="metrics.conv_").dropna()
            assert {k.removeprefix("metrics.") for k in logged.index} >= set(CONVENTION_KEYS)
        if task == "geckonum_autoeval":
            assert samples["evaluator_answers"].map(json.loads).map(len).min() >= 1
        assert (samples is not None and len(samples)) or failures, task
