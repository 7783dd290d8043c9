"""Results in the released PrACo layout: read, scored with both conventions, every bad cell reported.

The ``official_*`` values are checked against ``reference_scores``, a plain reimplementation of the released
scorer's rules (csv module, loops, the bilinear resize of the released ``_resize_density_map``:
``ndimage.zoom(order=1)``); the paper's metrics against the project's functions on the matrices read here
independently.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from countboard.counting.released.importer import import_praco
from countboard.counting.released.layout import read_exclusion_ids, read_meta, read_results
from countboard.metrics.counting import mosaic_metrics, negative_label_metrics
from countboard.metrics.praco_official import CSV_COLUMNS
from tests.fixtures.praco_release import MODEL, TEST_CLASSES, write_release


# ------------------------------------------------------------------ reference: the rules, written directly
def _read(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as f:
        rows = list(csv.reader(f))
    header = rows[0][1:]
    return {r[0]: dict(zip(header, r[1:], strict=True)) for r in rows[1:]}


def _num(text: str) -> float:
    return float(text) if text.strip() not in ("", "nan") else math.nan


def _mean(values):
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def _images(rel: dict) -> dict[str, tuple[str, float]]:
    """Valid images of the split with their class and gt (exclusion list, unknown ids, missing gt applied)."""
    meta = rel["meta"]
    class_of = dict(line.split("\t") for line in (meta / "ImageClasses_FSC147.txt").read_text().splitlines())
    excluded = {x.strip().removesuffix(".jpg") for x in rel["exclude"].read_text().split()}
    ann = json.loads((meta / "annotation_FSC147_384.json").read_text())
    cnts = json.loads((meta / "gt_cnts_FSC147.json").read_text())
    out = {}
    for i, c in class_of.items():
        if c not in TEST_CLASSES or i.removesuffix(".jpg") in excluded:
            continue
        gt = len(ann[i]["points"]) if "points" in ann.get(i, {}) else cnts.get(i)
        if gt is not None:
            out[i] = (c, float(gt))
    return out


def _resize(m: np.ndarray, shape) -> np.ndarray:
    """The released ``_resize_density_map``: ``ndimage.zoom`` of order 1, rescaled to the count when positive."""
    count = m.sum()
    out = ndimage.zoom(m, (shape[0] / m.shape[0], shape[1] / m.shape[1]), order=1)
    return out * (count / out.sum()) if out.sum() > 0 else out


def _cells(a: np.ndarray, n: int) -> list[float]:
    h, w = a.shape
    sy, sx = h // n, w // n
    out = []
    for r in range(n):
        for c in range(n):
            y1 = h if r == n - 1 else (r + 1) * sy
            x1 = w if c == n - 1 else (c + 1) * sx
            out.append(float(a[r * sy:y1, c * sx:x1].sum()))
    return out


def reference_scores(rel: dict, halves=("upper", "lower")) -> dict[str, float]:
    images = _images(rel)
    t1, up, low = _read(rel["test1"]), _read(rel["upper"]), _read(rel["lower"])
    np_, nmn, near, abs_err, sq_err = [], [], [], [], []
    for i, row in t1.items():
        if i not in images or any(math.isnan(_num(row[c])) for c in TEST_CLASSES):
            continue
        own, gt = images[i]
        pos = _num(row[own])
        neg = sum(_num(row[c]) for c in TEST_CLASSES if c != own) / (len(TEST_CLASSES) - 1)
        if gt:
            np_.append(pos / gt)
            nmn.append(neg / gt)
        near.append(abs(gt - pos) < abs(gt - neg))
        abs_err.append(abs(pos - gt))
        sq_err.append((pos - gt) ** 2)
    out = {"official_avg_np": _mean(np_), "official_avg_nmn": _mean(nmn),
           "official_pccn": 100 * sum(near) / len(near), "official_mae": sum(abs_err) / len(abs_err),
           "official_rmse": math.sqrt(sum(sq_err) / len(sq_err))}
    per_image = {"r": [], "p": [], "f": []}
    loc: dict[str, list] = {}
    for i, row in up.items():
        if i not in images:
            continue
        own, gt = images[i]
        rs, ps, fs, any_mosaic = [], [], [], False
        per_mosaic: dict[str, list] = {}
        for c in TEST_CLASSES:
            if c == own:
                rs.append(1.0 if gt else math.nan)   # min(NaN, gt) -> gt
                continue
            u, lo = _num(row[c]), _num(low[i][c])
            if math.isnan(u) or math.isnan(lo):
                continue
            any_mosaic = True
            u, lo = max(u, 0.0), max(lo, 0.0)
            tp = min(u, gt)
            r = tp / gt if gt else math.nan
            p = tp / (u + lo) if u + lo else math.nan
            f = 2 * p * r / (p + r) if not (math.isnan(p) or math.isnan(r)) and p + r else math.nan
            rs.append(r), ps.append(p), fs.append(f)
            _loc_mosaic(rel, i, c, per_mosaic, halves)
        if any_mosaic:
            per_image["r"].append(_mean(rs)), per_image["p"].append(_mean(ps)), per_image["f"].append(_mean(fs))
        for key, values in per_mosaic.items():
            loc.setdefault(key, []).append(values)
    out.update({"official_avg_cnt_recall": _mean(per_image["r"]), "official_avg_cnt_precision": _mean(per_image["p"]),
                "official_avg_cnt_fscore": _mean(per_image["f"])})
    for key, groups in loc.items():
        out[key.replace("@", "macro")] = _mean([_mean(g) for g in groups])
        out[key.replace("@", "micro")] = _mean([v for g in groups for v in g])
    return out


def _loc_mosaic(rel: dict, image: str, cls: str, per_mosaic: dict, halves) -> None:
    stem = image.removesuffix(".jpg")
    paths = [rel["model_dir"] / "density_maps" / f"{stem}_{cls}_{h}.npy" for h in halves]
    gt_path = rel["gt_dir"] / f"{stem}.npy"
    if not gt_path.exists() or not all(p.exists() for p in paths):
        return
    g = np.clip(np.load(gt_path).astype(np.float64), 0, None)
    halves = [np.clip(np.load(p).astype(np.float64), 0, None) for p in paths]
    halves = [h if h.shape == g.shape else _resize(h, g.shape) for h in halves]
    stack = np.vstack if paths[0].stem.endswith("_upper") else np.hstack
    pred, truth = stack(halves), stack([g, np.zeros_like(g)])
    for n in (2, 4, 8):
        tp = fp = ae = gs = 0.0
        for pc, gc in zip(_cells(pred, n), _cells(truth, n), strict=True):
            tp, fp, ae, gs = tp + min(pc, gc), fp + max(0.0, pc - gc), ae + abs(pc - gc), gs + gc
        r = tp / gs if gs else math.nan
        p = tp / (tp + fp) if tp + fp else math.nan
        f = 2 * p * r / (p + r) if (r > 0 and p > 0) else math.nan
        for name, v in (("total_mae", ae), ("recall", r), ("precision", p), ("f_score", f)):
            per_mosaic.setdefault(f"official_localized_{name}_@_div{n * n}", []).append(v)


# ---------------------------------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict:
    return write_release(tmp_path_factory.mktemp("praco_release"))


@pytest.fixture(scope="module")
def imported(release):
    return import_praco(release["model_dir"], release["meta"], None, gt_maps_dir=release["gt_dir"],
                        exclude=release["exclude"])


def test_official_values_equal_the_reference(release, imported):
    ref = reference_scores(release)
    got = imported.scored.metrics
    assert len([k for k in ref if "localized" in k]) == 24
    for key, value in ref.items():
        if math.isnan(value):
            assert key not in got, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    # the convention that differs: the positive column's recall of 1 lifts CntR above the paper's
    assert got["official_avg_cnt_recall"] > got["cnt_recall"]
    assert got["official_avg_cnt_precision"] == pytest.approx(got["cnt_precision"])
    assert got["official_avg_cnt_fscore"] == pytest.approx(got["cnt_f1"])
    assert got["official_avg_nmn"] == pytest.approx(got["nmn"])


def test_paper_metrics_equal_the_project_functions(release, imported):
    images = _images(release)
    t1, up, low = _read(release["test1"]), _read(release["upper"]), _read(release["lower"])
    ids = [i for i, row in t1.items() if i in images and all(not math.isnan(_num(row[c])) for c in TEST_CLASSES)]
    counts = [[_num(t1[i][c]) for c in TEST_CLASSES] for i in ids]
    expected = negative_label_metrics(counts, [images[i][1] for i in ids],
                                      [TEST_CLASSES.index(images[i][0]) for i in ids])
    for key in ("nmn", "pccn", "mae", "rmse", "mape"):
        assert imported.scored.metrics[key] == pytest.approx(expected[key]), key
    ids2 = [i for i in up if i in images]
    grid_up = np.array([[math.nan if c == images[i][0] else _num(up[i][c]) for c in TEST_CLASSES] for i in ids2])
    grid_low = np.array([[math.nan if c == images[i][0] else _num(low[i][c]) for c in TEST_CLASSES] for i in ids2])
    grid_up[np.isnan(grid_low)] = np.nan
    grid_low[np.isnan(grid_up)] = np.nan
    expected = mosaic_metrics(grid_up, grid_low, [images[i][1] for i in ids2])
    for key in ("cnt_precision", "cnt_recall", "cnt_f1"):
        assert imported.scored.metrics[key] == pytest.approx(expected[key]), key
    assert "loc_f1_micro_8x8" in imported.scored.metrics


def test_every_left_out_cell_is_reported(release, imported):
    problems = [str(p) for p in imported.scored.problems]
    t1, t2u = f"Inference_Test1_{MODEL}_test.csv", f"Inference_Test2_Upper_{MODEL}_test.csv"
    expect = [
        f"{t1}:1,unicorns: not a class of the split: column left out",
        f"{t1}:4,red apples: no count ('nan')",
        f"{t1}:-,-: image '12.jpg' of the split has no row",
        f"{t2u}:10,cats: empty cell",
        f"{t2u}:11,red apples: the positive class's cell holds '3.00'; ignored",
        "annotation_FSC147_384.json:-,8.jpg: no ground-truth count (no `points`, not in gt_cnts_FSC147.json): "
        "image left out",
        "density_maps/11_cats_lower.npy:-,-: mosaic 11.jpg / 'cats': file missing",
    ]
    for line in expect:
        assert line in problems, line
    assert any(p.startswith(f"{t1}:") and "unknown image '999.jpg'" in p for p in problems)
    assert any("image '50.jpg' is of class 'pens'" in p for p in problems)
    assert not any("60.jpg" in p or "61.jpg" in p for p in problems)   # excluded: dropped, not a problem
    res = read_results(release["model_dir"], read_meta(release["meta"], exclude=release["exclude"]))
    assert "7.jpg" in res.images and res.gt[res.images.index("7.jpg")] == json.loads(
        (release["meta"] / "gt_cnts_FSC147.json").read_text())["7.jpg"]   # no points: gt_cnts used


def test_final_metrics_csv_is_rounded_as_released(imported):
    frame = imported.scored.final_metrics
    assert list(frame.columns) == ["Model", *CSV_COLUMNS]
    assert len(CSV_COLUMNS) == 8 + 24
    row = frame.iloc[0]
    metrics = imported.scored.metrics
    assert row["PCCN"] == round(metrics["official_pccn"], 2)
    assert row["AvgCntRecall"] == round(metrics["official_avg_cnt_recall"], 3)
    assert row["Localized_F-score_micro_div64"] == round(metrics["official_localized_f_score_micro_div64"], 3)


def test_official_rounding_rounds_the_logged_values(release):
    rounded = import_praco(release["model_dir"], release["meta"], None, exclude=release["exclude"],
                           official_rounding=True).scored.metrics
    assert rounded["official_mae"] == round(rounded["official_mae"], 3)
    assert rounded["official_pccn"] == round(rounded["official_pccn"], 2)
    assert "official_localized_recall_micro_div4" not in rounded   # no gt maps given: no localized metrics


def test_exclusion_ids_with_or_without_jpg(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("290\n296.jpg\n# comment\n\n")
    assert read_exclusion_ids(path) == {"290", "296"}
    assert len(read_exclusion_ids(None)) == 38


def test_horizontal_collage_reads_left_and_right_maps(release, tmp_path):
    import shutil

    rel = dict(release)
    rel["model_dir"] = tmp_path / MODEL
    shutil.copytree(release["model_dir"], rel["model_dir"])
    for path in (rel["model_dir"] / "density_maps").glob("*.npy"):
        path.rename(path.with_name(path.name.replace("_upper.npy", "_left.npy").replace("_lower.npy", "_right.npy")))
    got = import_praco(rel["model_dir"], rel["meta"], None, gt_maps_dir=rel["gt_dir"], exclude=rel["exclude"],
                       collage="horizontal").scored.metrics
    ref = reference_scores(rel, halves=("left", "right"))
    vertical = reference_scores(release)
    assert ref["official_localized_recall_micro_div16"] != vertical["official_localized_recall_micro_div16"]
    for key, value in ref.items():
        if "localized" in key and not math.isnan(value):
            assert got[key] == pytest.approx(value, rel=1e-9), key


def test_a_second_row_of_an_image_is_reported(release, tmp_path):
    import shutil

    model_dir = tmp_path / MODEL
    shutil.copytree(release["model_dir"], model_dir)
    t1 = model_dir / release["test1"].name
    lines = t1.read_text().splitlines()
    t1.write_text("\n".join([*lines, lines[1].replace(",", ",9", 1)]) + "\n")
    meta = read_meta(release["meta"], exclude=release["exclude"])
    res = read_results(model_dir, meta)
    first = lines[1].split(",")[0]
    assert f"{t1.name}:{len(lines) + 1},-: second row of image {first!r}: left out (the first is used)" in [
        str(p) for p in res.problems]
    original = read_results(release["model_dir"], meta)
    np.testing.assert_array_equal(res.counts, original.counts)


def test_a_missing_class_column_is_reported(release, tmp_path):
    import shutil

    import pandas as pd

    model_dir = tmp_path / MODEL
    shutil.copytree(release["model_dir"], model_dir)
    lower = model_dir / release["lower"].name
    pd.read_csv(lower, index_col=0, dtype=str).drop(columns=["cats"]).to_csv(lower)
    res = read_results(model_dir, read_meta(release["meta"], exclude=release["exclude"]))
    assert any(str(p).startswith(f"{lower.name}:1,cats: class of the split without a column") for p in res.problems)
    assert np.isnan(res.lower[:, TEST_CLASSES.index("cats")]).all()
