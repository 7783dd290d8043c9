"""Real sweeps of the transformers counters of 2026 on tiny random models, and of CountBench and PairTally from
generated fixtures (each a separate countboard-sweep process writing to one store)."""

import importlib.util

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_sweep, store_runs
from tests.fixtures.count_datasets import write_countbench, write_pairtally
from tests.fixtures.tiny_models import (
    build_tiny_florence2,
    build_tiny_grounding_dino,
    build_tiny_omdet_turbo,
    build_tiny_sam3,
)

pytestmark = pytest.mark.slow

SMALL = ["dataset=synthetic_shapes", "dataset.images_per_class={train:0,val:0,test:2}",
         "dataset.multi_class_images=0", "dataset.image_size=[64,64]", "dataset.size_range=[6,10]",
         "dataset.count_range=[1,15]", "dataset.n_classes=4"]
# thresholds a random model's scores cross (its scores are not a trained model's)
MODELS = {
    "mm_grounding_dino": (lambda p: build_tiny_grounding_dino(p, mm=True, edges=(128, 256)),
                          ["model.box_threshold=0.03", "model.text_threshold=0.03"]),
    "omdet_turbo": (build_tiny_omdet_turbo, ["model.score_threshold=0.67"]),
    "florence2": (build_tiny_florence2, ["model.max_new_tokens=8", "model.num_beams=1"]),
}


def _cells(store):
    runs = store_runs(store)
    return runs[runs["tags.countboard.role"] == "cell"]


def test_new_counters_sweep_the_negative_and_mosaic_tests(tmp_path):
    for model, (build, overrides) in MODELS.items():
        (tmp_path / model).mkdir()
        folder = build(tmp_path / model)
        run_sweep(["-m", f"model={model}", f"model.model_id={folder}", "task=praco_negative,praco_mosaic",
                   *overrides, *SMALL], tmp_path)
    store = tmp_path / "mlruns"
    cells = _cells(store).set_index(["tags.model", "tags.task"])
    assert len(cells) == 6 and set(cells["status"]) == {"FINISHED"}
    for model in MODELS:
        neg, mos = cells.loc[(model, "praco_negative")], cells.loc[(model, "praco_mosaic")]
        assert not np.isnan(neg["metrics.mae"]) and neg["metrics.n_images"] == 8
        assert mos["metrics.n_samples"] > 0
        art = next(store.glob(f"artifacts/*/{neg['run_id']}/artifacts"))
        counts = pd.read_parquet(art / "tables" / "negative_counts.parquet")
        assert counts.shape[0] == 8
        assert len(list(next(store.glob(f"artifacts/*/{mos['run_id']}/artifacts")).glob("figures/mosaic_*.png")))
    # the random detectors count something; Florence-2's random decoder ends its answers at once (0 boxes)
    assert cells.loc[("mm_grounding_dino", "praco_negative"), "metrics.mean_negative_count"] > 0
    assert cells.loc[("omdet_turbo", "praco_negative"), "metrics.mean_negative_count"] > 0


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None,
                    reason="torchvision is installed: model=sam3 can run, nothing to refuse")
def test_sam3_without_torchvision_is_refused_before_any_run(tmp_path):
    proc = run_sweep(["model=sam3", "task=praco_negative", *SMALL], tmp_path, check=False)
    assert proc.returncode != 0
    assert "model=sam3 needs torchvision" in proc.stderr + proc.stdout
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


@pytest.mark.torchvision
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None,
                    reason="model=sam3 needs torchvision (not installed: a CUDA build, kept out of the base install); "
                           "runs where it is importable (make gpu-check)")
def test_sam3_sweeps_the_negative_and_mosaic_tests(tmp_path):
    folder = build_tiny_sam3(tmp_path / "sam3")
    # the random model's instance scores sit near 0.25 (sigmoid(0)^2): a threshold some of them cross
    run_sweep(["-m", "model=sam3", f"model.model_id={folder}", "task=praco_negative,praco_mosaic",
               "model.score_threshold=0.25", *SMALL], tmp_path)
    store = tmp_path / "mlruns"
    cells = _cells(store).set_index("tags.task")
    assert len(cells) == 2 and set(cells["status"]) == {"FINISHED"} and set(cells["tags.model"]) == {"sam3"}
    neg, mos = cells.loc["praco_negative"], cells.loc["praco_mosaic"]
    assert not np.isnan(neg["metrics.mae"]) and neg["metrics.n_images"] == 8 and mos["metrics.n_samples"] > 0
    assert neg["metrics.mean_negative_count"] > 0
    counts = pd.read_parquet(next(store.glob(f"artifacts/*/{neg['run_id']}/artifacts")) / "tables"
                             / "negative_counts.parquet")
    assert counts.shape[0] == 8
    assert len(list(next(store.glob(f"artifacts/*/{mos['run_id']}/artifacts")).glob("figures/mosaic_*.png")))


def test_countbench_and_pairtally_sweep_from_fixtures(tmp_path):
    data = tmp_path / "data"
    write_countbench(data / "CountBenchQA", n=6)
    write_pairtally(data / "pairtally_dataset", n=8)
    (tmp_path / "mm").mkdir()
    folder = build_tiny_grounding_dino(tmp_path / "mm", mm=True, edges=(128, 256))
    common = ["model=mm_grounding_dino", f"model.model_id={folder}", "model.box_threshold=0.03",
              "model.text_threshold=0.03"]
    run_sweep([*common, "dataset=countbench", "task=countbench"], tmp_path)
    run_sweep(["-m", *common, "dataset=pairtally", "task=classic,praco_negative,praco_multiclass"], tmp_path)
    store = tmp_path / "mlruns"
    cells = _cells(store).set_index(["tags.dataset", "tags.task"])
    assert len(cells) == 4 and set(cells["status"]) == {"FINISHED"}
    bench = cells.loc[("countbench", "countbench")]
    assert 0.0 <= bench["metrics.exact_accuracy"] <= 1.0 and bench["metrics.n_images"] == 6
    art = next(store.glob(f"artifacts/*/{bench['run_id']}/artifacts"))
    assert pd.read_parquet(art / "tables" / "error_by_number.parquet")["number"].tolist() == [2, 3, 4, 5, 6, 7]
    assert cells.loc[("pairtally", "classic"), "metrics.n_images"] == 6  # two share one prompt: left out
    assert not np.isnan(cells.loc[("pairtally", "praco_multiclass"), "metrics.mc_mae_micro"])
