"""PrACo++ results in the released multi-class layout: the authors' final metrics, every bad cell reported,
export then import is the identity.

``reference_final_metrics`` recomputes ``multiclass_final_metrics_<split>.csv`` from the folder the way the
authors' ``MulticlassStatisticsExtractor`` and ``multiclass_main_statistics.py`` describe it (csv module, loops,
scipy's zoom, per-row rounding to 3 decimals), independently of the project's functions.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import ndimage

from countboard.counting.released.importer import import_praco
from countboard.errors import ConfigError
from countboard.metrics.praco_multiclass import MC_CSV_COLUMNS
from tests.fixtures.praco_mc_release import MODEL, write_mc_release


def _mean(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def _localized_rows(rel: dict, rows: dict, divisions: int, rounded: bool) -> list[dict]:
    out = []
    r = (lambda v: round(v, 3)) if rounded else (lambda v: v)
    for image in rows:
        for cls in rel["classes_of"][image]:
            name = f"{image.rsplit('.', 1)[0]}_{cls}.npy"
            g = np.maximum(np.load(rel["meta"] / "density_maps" / name).astype(np.float64), 0)
            p = np.maximum(np.load(rel["model_dir"] / "density_maps" / name).astype(np.float64), 0)
            if p.shape != g.shape:
                z = ndimage.zoom(p, (g.shape[0] / p.shape[0], g.shape[1] / p.shape[1]), order=1)
                p = z * (p.sum() / z.sum()) if z.sum() > 0 else z
            n, (h, w) = 2 ** divisions, g.shape
            mae = tp = fp = 0.0
            for a in range(n):
                for b in range(n):
                    ys = slice(a * (h // n), (a + 1) * (h // n) if a < n - 1 else h)
                    xs = slice(b * (w // n), (b + 1) * (w // n) if b < n - 1 else w)
                    pc, gc = p[ys, xs].sum(), g[ys, xs].sum()
                    mae, tp, fp = mae + abs(pc - gc), tp + min(pc, gc), fp + max(0.0, pc - gc)
            rec = tp / g.sum() if g.sum() > 0 else math.nan
            prec = tp / (tp + fp) if tp + fp > 0 else math.nan
            f = 2 * prec * rec / (prec + rec) if prec > 0 and rec > 0 else math.nan
            out.append({"image": image, "MAE": r(mae), "Recall": r(rec) if not math.isnan(rec) else math.nan,
                        "Precision": r(prec) if not math.isnan(prec) else math.nan,
                        "Fscore": r(f) if not math.isnan(f) else math.nan})
    return out


def reference_final_metrics(rel: dict, rounded: bool = True) -> dict[str, float]:
    """The authors' final metrics row of a clean release folder (``rounded``: as their CSV holds it)."""
    with (rel["model_dir"] / f"multiclass_{MODEL}_test1.csv").open() as f:
        table = list(csv.reader(f))
    classes = table[0][1:]
    rows = {r[0]: dict(zip(classes, map(float, r[1:]), strict=True)) for r in table[1:]}
    counts = rel["counts"]
    n = len(rows)
    acc = dict.fromkeys(("mnp", "mnp_num", "mnp_den", "nmn", "nmn_num", "nmn_den", "mae", "mae_num", "mae_den",
                         "rmse", "rmse_num", "pccn1", "pccn2"), 0.0)
    for image, pred in rows.items():
        pos = rel["classes_of"][image]
        neg = [c for c in classes if c not in pos]
        pp, pg, npred = [pred[c] for c in pos], [counts[image][c] for c in pos], [pred[c] for c in neg]
        errors = [abs(a - b) for a, b in zip(pp, pg, strict=True)]
        if neg:
            acc["mnp"] += sum(npred) / len(neg)
            acc["mnp_num"] += sum(npred)
            acc["mnp_den"] += len(neg)
            acc["nmn"] += sum(npred) / len(neg) / sum(pg)
            acc["nmn_num"] += sum(npred)
            acc["nmn_den"] += len(neg) * sum(pg)
            d_pos = sum(errors) / len(pos)
            one = sum(sum(abs(g - x) for x in npred) / len(neg) for g in pg) / len(pos)
            avg = sum(abs(sum(pg) / len(pos) - x) for x in npred) / len(neg)
            acc["pccn1"] += d_pos < one
            acc["pccn2"] += d_pos < avg
        acc["mae"] += sum(errors) / len(pos)
        acc["mae_num"] += sum(errors)
        acc["mae_den"] += len(pos)
        acc["rmse"] += math.sqrt(sum(e * e for e in errors) / len(pos))
        acc["rmse_num"] += sum(e * e for e in errors)
    out = {"MNP_macro": acc["mnp"] / n, "MNP_micro": acc["mnp_num"] / acc["mnp_den"],
           "NMN_macro": acc["nmn"] / n, "NMN_micro": acc["nmn_num"] / acc["nmn_den"],
           "PCCN_oneatatime": 100 * acc["pccn1"] / n, "PCCN_avgGT": 100 * acc["pccn2"] / n,
           "MAE_macro": acc["mae"] / n, "MAE_micro": acc["mae_num"] / acc["mae_den"],
           "RMSE_macro": acc["rmse"] / n, "RMSE_micro": math.sqrt(acc["rmse_num"] / acc["mae_den"])}
    for divisions in (1, 2, 3):
        loc = _localized_rows(rel, rows, divisions, rounded)
        cells = 4 ** divisions
        for metric in ("MAE", "Recall", "Precision", "Fscore"):
            per_image = {}
            for row in loc:
                per_image.setdefault(row["image"], []).append(row[metric])
            out[f"Localized_{metric}_macro_div{cells}"] = _mean([_mean(v) for v in per_image.values()])
            out[f"Localized_{metric}_micro_div{cells}"] = _mean([row[metric] for row in loc])
    return {k: round(v, 3) for k, v in out.items()} if rounded else out


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return write_mc_release(tmp_path_factory.mktemp("mc_clean"))


@pytest.fixture(scope="module")
def dirty(tmp_path_factory):
    return write_mc_release(tmp_path_factory.mktemp("mc_dirty"), dirty=True)


def test_import_gives_the_authors_final_metrics_for_every_column(clean):
    result = import_praco(clean["model_dir"], clean["meta"], None)
    assert result.tags.task == "praco_multiclass" and result.tags.dataset == "praco_multiclass"
    assert not result.scored.problems
    row = result.scored.final_metrics.iloc[0].to_dict()
    assert list(row) == ["Model", *MC_CSV_COLUMNS]
    expected = reference_final_metrics(clean)
    assert set(expected) == set(MC_CSV_COLUMNS)
    for col, value in expected.items():    # the authors round each (image, class) row before averaging
        assert row[col] == pytest.approx(value, abs=1.5e-3), col
    unrounded = reference_final_metrics(clean, rounded=False)
    for col, key in MC_CSV_COLUMNS.items():
        assert result.scored.metrics[key] == pytest.approx(unrounded[col], rel=1e-9, abs=1e-12), col
    # the image holding every class: the project leaves it out of MNP macro, the authors divide by all images
    assert result.scored.metrics["mc_mnp_macro"] > result.scored.metrics["official_mc_mnp_macro"]
    counted = import_praco(clean["model_dir"], clean["meta"], None, all_class_images="count").scored.metrics
    assert counted["mc_mnp_macro"] == pytest.approx(counted["official_mc_mnp_macro"])


def test_every_left_out_cell_is_reported(dirty):
    problems = [str(p) for p in import_praco(dirty["model_dir"], dirty["meta"], None).scored.problems]
    for expected in dirty["problems"]:
        assert any(p.startswith(expected) for p in problems), (expected, problems)
    scored = import_praco(dirty["model_dir"], dirty["meta"], None).scored
    assert scored.metrics["mc_n_images"] == 4    # 7 images: no row, empty cell, non-numeric cell left out


def test_a_multiclass_folder_without_its_metadata_is_one_line(clean, tmp_path):
    from countboard.counting.released.importer import import_folders

    with pytest.raises(ConfigError, match="--multiclass META_DIR"):
        import_folders([clean["model_dir"]], clean["meta"], None)


def test_cli_import_export_import_is_the_identity(clean, tmp_path, capsys):
    from countboard.cli import main
    from countboard.tracking.store import open_store

    store = tmp_path / "mlruns"
    assert main(["import-praco", str(clean["model_dir"]), "--multiclass", str(clean["meta"]), "--store", str(store),
                 "--keep-maps", "--final-metrics", str(tmp_path / "final.csv")]) == 0
    assert "logged run" in capsys.readouterr().out
    tracker = open_store(str(store), create=True)
    exp = tracker.client.get_experiment_by_name("countboard/counters")
    (first,) = tracker.client.search_runs([exp.experiment_id])
    out = tmp_path / "exported"
    assert main(["export-praco", first.info.run_id, "--out", str(out), "--store", str(store)]) == 0
    folder = out / MODEL
    a = pd.read_csv(clean["model_dir"] / f"multiclass_{MODEL}_test1.csv", index_col=0)
    b = pd.read_csv(folder / f"multiclass_{MODEL}_test1.csv", index_col=0)
    pd.testing.assert_frame_equal(a, b)
    assert sorted(p.name for p in (folder / "density_maps").iterdir()) == sorted(
        p.name for p in (clean["model_dir"] / "density_maps").iterdir())
    meta2 = tmp_path / "meta2"
    meta2.mkdir()
    for name in ("multiclass_split_images.json", "multiclass_split_classes.json",
                 "multiclass_class_counts_per_image.json"):
        (meta2 / name).write_bytes((clean["meta"] / name).read_bytes())
    assert main(["import-praco", str(folder), "--multiclass", str(meta2), "--gt-density-maps",
                 str(out / "gt_density_maps"), "--store", str(store)]) == 0
    runs = tracker.client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    second = runs[1]
    assert set(second.data.metrics) == set(first.data.metrics)
    assert second.data.metrics == pytest.approx(first.data.metrics, rel=1e-6)
    final = pd.read_csv(tmp_path / "final.csv", index_col=0)    # the authors' layout: row index, then Model
    assert final["Model"].tolist() == [MODEL] and list(final.columns) == ["Model", *MC_CSV_COLUMNS]
    assert json.loads(tracker.download(first.info.run_id, "problems.json", tmp_path / "p").read_text()) == []
    assert Path(tracker.download(first.info.run_id, "files/multiclass_final_metrics_test.csv",
                                 tmp_path / "f")).is_file()
