"""A real sweep of the classic protocol over PixMo-Count, TallyQA, CAPTURe, FSCD-147, CountQA and MUCCA, each read
from its fixture where its config looks by default: the oracle counts every unit right, and a tiny random VLM
answers every question (its raw answers kept, the unparsable ones failed)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from countboard.models.tiny_asked import build_tiny_vlm
from tests.conftest import run_sweep, store_runs
from tests.fixtures.field_datasets import write_all

DATASETS = ("pixmo_count", "tallyqa", "capture", "fscd147", "countqa", "mucca")


def _artifacts(store, run_id):
    return next(store.glob(f"artifacts/*/{run_id}/artifacts"))


@pytest.mark.slow
def test_classic_sweep_over_the_field_datasets_with_the_oracle_and_a_vlm(tmp_path):
    truth = write_all(tmp_path / "data")
    tiny = build_tiny_vlm(tmp_path / "tiny_llava", "llava")
    run_sweep(["-m", "model=oracle", f"dataset={','.join(DATASETS)}", "task=classic"], tmp_path, timeout=600)
    run_sweep(["-m", "model=vlm", f"model.model_id={tiny}", "model.max_new_tokens=4",
               f"dataset={','.join(DATASETS)}", "task=classic"], tmp_path, timeout=600)
    # MUCCA under PrACo++ too: every class prompted, localized metrics against the authors' maps of its points
    run_sweep(["model=oracle", "dataset=mucca", "task=praco_multiclass"], tmp_path, timeout=300)
    store = tmp_path / "mlruns"
    runs = store_runs(store)
    cells = runs[runs["tags.countboard.role"] == "cell"]
    assert len(cells) == 2 * len(DATASETS) + 1 and set(cells["status"]) == {"FINISHED"}
    multiclass = cells[cells["params.task.name"] == "praco_multiclass"].iloc[0]
    assert multiclass["metrics.mc_mae_macro"] == 0.0
    assert multiclass["metrics.mc_localized_mae_macro_div4"] < 0.5
    cells = cells[cells["params.task.name"] == "classic"]
    for _, cell in cells.iterrows():
        dataset, model = cell["params.dataset.name"], cell["params.model.name"]
        art = _artifacts(store, cell["run_id"])
        samples = pd.read_parquet(art / "samples.parquet") if (art / "samples.parquet").exists() else None
        failures = json.loads((art / "failures.json").read_text()) if (art / "failures.json").exists() else []
        n_units = len(samples if samples is not None else []) + len(failures)
        expected = {"pixmo_count": 6, "tallyqa": 8, "capture": 4, "fscd147": 3, "countqa": 6, "mucca": 4}[dataset]
        assert n_units == expected, (dataset, model)
        if model == "oracle":
            assert not failures and cell["metrics.mae"] == 0.0 and cell["metrics.exact_accuracy"] == 1.0, dataset
        else:
            assert all("unparsable answer" in f["error"] for f in failures), (dataset, failures[:1])
            if samples is not None and len(samples):
                assert samples["answer"].notna().all()
        if dataset in ("tallyqa", "capture", "countqa", "pixmo_count") and samples is not None and len(samples):
            assert samples["question"].str.len().min() > 0  # the question is recorded with each unit
    assert len(truth["fscd147"]) == 9
