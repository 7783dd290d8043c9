"""The issue's done-when sweep: ``-m model=vlm,owlv2,oracle dataset=pixmo_count,tallyqa,capture,fscd147,countqa,mucca
task=classic`` (each model pointed at a tiny local copy, each dataset read from its fixture where its config looks
by default), 18 cells into one store. Every cell finishes with the count metrics; a VLM logs its accuracy under every
scoring convention; a counter that outputs boxes logs AP on FSCD-147 (equal to pycocotools' COCOeval run here on the
boxes the run stored and the dataset's own ``instances_test.json``) and no detection metric anywhere else."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from countboard.models.conventions import CONVENTION_KEYS
from countboard.models.tiny_asked import build_tiny_vlm
from tests.conftest import run_sweep, store_runs
from tests.fixtures.field_datasets import write_all
from tests.fixtures.tiny_models import build_tiny_owlv2

DATASETS = ("pixmo_count", "tallyqa", "capture", "fscd147", "countqa", "mucca")
MODELS = ("vlm", "owlv2", "oracle")
UNITS = {"pixmo_count": 6, "tallyqa": 8, "capture": 4, "fscd147": 3, "countqa": 6, "mucca": 4}
# over every answered image: defined for every cell, a missing count included
COUNT_METRICS = ("off_by_one_acc", "nmae", "smape", "relaxed_acc_5", "relaxed_acc_10")
DETECTION = ("det_ap", "det_ap50", "n_det_images")
# three real sweeps (18 cells), PrACo++ on MUCCA and a jittered detector on FSCD-147: minutes on two busy cores
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _artifacts(store, run_id):
    return next(store.glob(f"artifacts/*/{run_id}/artifacts"))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("field_sweep")
    truth = write_all(tmp_path / "data")
    tiny_vlm = build_tiny_vlm(tmp_path / "tiny_llava", "llava")
    tiny_owl = build_tiny_owlv2(tmp_path / "tiny_owlv2")
    datasets = f"dataset={','.join(DATASETS)}"
    run_sweep(["-m", "model=oracle", datasets, "task=classic"], tmp_path, timeout=600)
    run_sweep(["-m", "model=vlm", f"model.model_id={tiny_vlm}", "model.max_new_tokens=4", datasets, "task=classic"],
              tmp_path, timeout=600)
    # random weights: keep every box, so that the tiny detector outputs some
    run_sweep(["-m", "model=owlv2", f"model.model_id={tiny_owl}", "model.score_threshold=0.0", "model.nms_iou=0.3",
               datasets, "task=classic"], tmp_path, timeout=600)
    # boxes of every precision (the tiny OWLv2's find nothing, the oracle's everything): AP strictly inside (0, 100)
    run_sweep(["model=jitter_detector", "dataset=fscd147", "task=classic"], tmp_path, toy=True, timeout=300)
    # MUCCA under PrACo++ too: every class prompted, localized metrics against the authors' maps of its points
    run_sweep(["model=oracle", "dataset=mucca", "task=praco_multiclass"], tmp_path, timeout=300)
    store = tmp_path / "mlruns"
    runs = store_runs(store)
    return tmp_path, store, truth, runs[runs["tags.countboard.role"] == "cell"]


def _classic(cells, models=MODELS) -> pd.DataFrame:
    return cells[(cells["params.task.name"] == "classic") & cells["params.model.name"].isin(models)]


def _logged(cell) -> set[str]:
    return {k.removeprefix("metrics.") for k, v in cell.items() if k.startswith("metrics.") and pd.notna(v)}


def test_every_cell_of_the_sweep_finishes(swept):
    _, _, _, cells = swept
    classic = _classic(cells)
    assert len(classic) == len(MODELS) * len(DATASETS) and set(cells["status"]) == {"FINISHED"}
    assert set(zip(classic["params.model.name"], classic["params.dataset.name"], strict=True)) == {
        (m, d) for m in MODELS for d in DATASETS}


def test_every_cell_logs_the_metrics_that_apply_to_it(swept):
    _, _, _, cells = swept
    for _, cell in _classic(cells).iterrows():
        dataset, model = cell["params.dataset.name"], cell["params.model.name"]
        logged = _logged(cell)
        assert set(COUNT_METRICS) <= logged, (model, dataset, set(COUNT_METRICS) - logged)
        assert all(f"{k}__low" in logged and f"{k}__high" in logged for k in COUNT_METRICS), (model, dataset)
        assert cell["metrics.n_images_all"] == UNITS[dataset], (model, dataset)
        conventions = set(CONVENTION_KEYS) & logged
        assert conventions == (set(CONVENTION_KEYS) if model == "vlm" else set()), (model, dataset)
        boxes = model in ("owlv2", "oracle") and dataset == "fscd147"  # a detector on the set with object boxes
        assert (set(DETECTION) & logged) == (set(DETECTION) if boxes else set()), (model, dataset)
        if boxes:
            assert cell["metrics.n_det_images"] == UNITS[dataset]
            for key in ("det_ap", "det_ap50"):
                assert cell[f"metrics.{key}__low"] <= cell[f"metrics.{key}"] <= cell[f"metrics.{key}__high"]
        if model == "oracle":
            assert cell["metrics.mae"] == 0.0 and cell["metrics.exact_accuracy"] == 1.0, dataset
            assert cell["metrics.smape"] == 0.0 and cell["metrics.off_by_one_acc"] == 100.0, dataset
    oracle = _classic(cells).set_index(["params.model.name", "params.dataset.name"]).loc[("oracle", "fscd147")]
    assert oracle["metrics.det_ap"] == pytest.approx(100.0) and oracle["metrics.det_ap50"] == pytest.approx(100.0)


def test_the_units_are_kept_with_their_answers_and_questions(swept):
    _, store, truth, cells = swept
    multiclass = cells[cells["params.task.name"] == "praco_multiclass"].iloc[0]
    assert multiclass["metrics.mc_mae_macro"] == 0.0
    assert multiclass["metrics.mc_localized_mae_macro_div4"] < 0.5
    for _, cell in _classic(cells).iterrows():
        dataset, model = cell["params.dataset.name"], cell["params.model.name"]
        art = _artifacts(store, cell["run_id"])
        samples = pd.read_parquet(art / "samples.parquet") if (art / "samples.parquet").exists() else None
        failures = json.loads((art / "failures.json").read_text()) if (art / "failures.json").exists() else []
        assert len(samples if samples is not None else []) + len(failures) == UNITS[dataset], (dataset, model)
        if model == "vlm":
            assert all("unparsable answer" in f["error"] for f in failures), (dataset, failures[:1])
            if samples is not None and len(samples):
                assert samples["answer"].notna().all()
        else:
            assert not failures, (dataset, model, failures[:1])
        if dataset in ("tallyqa", "capture", "countqa", "pixmo_count") and samples is not None and len(samples):
            assert samples["question"].str.len().min() > 0  # the question is recorded with each unit
    assert len(truth["fscd147"]) == 9


def _coco_ap(samples: pd.DataFrame, instances: dict) -> tuple[float, float]:
    """AP and AP50 by pycocotools on FSCD-147's own ground truth (its COCO file) and the run's stored boxes."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = COCO()
    gt.dataset = {**instances, "categories": [{"id": 1, "name": "fg"}]}
    gt.createIndex()
    ids = {im["file_name"]: im["id"] for im in instances["images"]}
    dets = []
    for _, row in samples.iterrows():
        boxes = np.asarray(row["pred_boxes"], float).reshape(-1, 4)  # y0, x0, y1, x1
        dets += [{"image_id": ids[row["image_id"]], "category_id": 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                  "score": float(s)} for (y0, x0, y1, x1), s in zip(boxes.tolist(), row["pred_scores"], strict=True)]
    ev = COCOeval(gt, gt.loadRes(dets), "bbox")
    ev.params.imgIds = sorted(ids[i] for i in samples["image_id"])
    ev.params.maxDets = [900, 1000, 1100]
    ev.evaluate()
    ev.accumulate()
    # summarize()'s AP line reads maxDets=100, absent from FSCD-147's limits: the precision at 1100 is read here
    precision = ev.eval["precision"][:, :, 0, ev.params.areaRngLbl.index("all"), -1]
    return 100 * precision[precision > -1].mean(), 100 * precision[0][precision[0] > -1].mean()


def test_ap_on_fscd147_equals_coco_eval_on_the_stored_boxes(swept):
    tmp_path, store, _, cells = swept
    instances = json.loads((tmp_path / "data" / "FSC147_384_V2" / "instances_test.json").read_text())
    found = {}
    for model in ("owlv2", "oracle", "jitter_detector"):
        cell = _classic(cells, (model,)).set_index(["params.model.name", "params.dataset.name"]).loc[(model, "fscd147")]
        samples = pd.read_parquet(_artifacts(store, cell["run_id"]) / "samples.parquet")
        assert (samples["count"] == samples["pred_scores"].map(len)).all()  # the count is the boxes found
        ap, ap50 = found[model] = _coco_ap(samples, instances)
        assert cell["metrics.det_ap"] == pytest.approx(ap, abs=1e-9), model
        assert cell["metrics.det_ap50"] == pytest.approx(ap50, abs=1e-9), model
        assert cell["metrics.det_ap__low"] <= cell["metrics.det_ap"] <= cell["metrics.det_ap__high"]
    assert found["oracle"] == pytest.approx((100.0, 100.0))
    assert 0 < found["jitter_detector"][0] < found["jitter_detector"][1] < 100


def test_the_board_ranks_ap_on_fscd147_with_its_interval(swept):
    import duckdb

    from countboard.index import build_index
    from countboard.quantify.ranks import rank_ranges
    from countboard.schema import load_schema

    tmp_path, store, _, _ = swept
    db = tmp_path / "index.duckdb"
    build_index(f"sqlite:///{store.resolve() / 'mlflow.db'}", db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT * FROM counters WHERE dataset = 'fscd147' AND task = 'classic'").df()
    finally:
        con.close()
    metric = load_schema().metrics["det_ap"]
    assert metric.interval is not None and {metric.interval.low, metric.interval.high} <= set(rows.columns)
    det = rows.dropna(subset=["det_ap"]).set_index("model")
    assert set(det.index) == {"owlv2", "oracle", "jitter_detector"}  # the VLM gives no boxes: no AP, no rank
    best, worst = rank_ranges(det["det_ap"], det[metric.interval.low], det[metric.interval.high], True)
    ranks = dict(zip(det.index, zip(best.tolist(), worst.tolist(), strict=True), strict=True))
    assert ranks["oracle"][0] == 1.0 and ranks["owlv2"][1] == 3.0
