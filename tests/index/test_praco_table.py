"""The counters table in the paper's layout: merging runs, both conventions, CSV and LaTeX, through a real index."""

from __future__ import annotations

import io
import math

import pandas as pd
import pytest

from countboard.index.praco_table import praco_caption, praco_table, table_csv, table_latex

NAN = math.nan


def _rows() -> pd.DataFrame:
    base = {"dataset": "fsc147", "split": "test", "is_latest": True}
    return pd.DataFrame([
        {**base, "model": "dave", "task": "praco_negative", "end_time": 3, "nmn": 0.08, "pccn": 97.62,
         "mae": 15.23, "rmse": 103.53, "official_avg_nmn": 0.08, "official_pccn": 97.62, "official_mae": 15.23,
         "official_rmse": 103.53},
        {**base, "model": "dave", "task": "praco_mosaic", "end_time": 4, "cnt_precision": 0.843,
         "cnt_recall": 0.799, "cnt_f1": 0.790, "official_avg_cnt_precision": 0.843,
         "official_avg_cnt_recall": 0.85, "official_avg_cnt_fscore": 0.790},
        {**base, "model": "countx", "task": "praco", "end_time": 1, "nmn": 0.95, "pccn": 64.51, "cnt_precision": 0.686,
         "cnt_recall": 0.712, "cnt_f1": 0.630, "mae": 15.92, "rmse": 106.89, "official_avg_cnt_recall": 0.76},
        {**base, "model": "dave", "task": "praco_mosaic", "end_time": 9, "is_latest": False, "cnt_precision": 0.1},
        {**base, "model": "dave", "split": "val", "task": "praco_mosaic", "end_time": 5, "cnt_precision": 0.2},
        {**base, "model": "dave", "task": "geckonum_autoeval", "end_time": 6, "mae": 99.0},
    ])


def test_rows_merge_per_counter_in_both_conventions():
    paper = praco_table(_rows())
    assert list(paper.columns) == ["Method", "NMN", "PCCN", "CntP", "CntR", "CntF1", "MAE", "RMSE", "Source"]
    dave = paper.set_index("Method").loc["dave"]
    assert (dave["NMN"], dave["CntP"], dave["CntR"], dave["MAE"], dave["Source"]) == (0.08, 0.843, 0.799, 15.23,
                                                                                       "run")
    released = praco_table(_rows(), convention="released").set_index("Method")
    assert released.loc["dave", "CntR"] == 0.85
    assert released.loc["countx", "CntR"] == 0.76 and math.isnan(released.loc["countx", "NMN"])
    assert released.loc["countx", "Source"] == "imported"
    assert praco_table(_rows(), split="val").set_index("Method").loc["dave", "CntP"] == 0.2
    with pytest.raises(ValueError, match="convention"):
        praco_table(_rows(), convention="mine")


def test_csv_and_latex():
    table = praco_table(_rows())
    csv = pd.read_csv(io.StringIO(table_csv(table)), dtype=str)
    assert csv.loc[csv["Method"] == "dave", "PCCN"].item() == "97.62"
    assert csv.loc[csv["Method"] == "dave", "CntP"].item() == "0.843"
    caption = praco_caption("released", "test")
    assert "released scorer" in caption and "recall of 1" in caption
    assert "paper" in praco_caption("paper", "val") and "val set" in praco_caption("paper", "val")
    tex = table_latex(table.assign(Method=["a_b & c", "dave"]), caption)
    assert r"\caption{" + caption.replace("_", r"\_") + "}" in tex
    assert r"\multicolumn{2}{c}{Negative Test} & \multicolumn{3}{c}{Mosaic Test} & \multicolumn{2}{c}{Classic}" in tex
    assert r"NMN $\downarrow$ & PCCN $\uparrow$" in tex
    assert r"a\_b \& c & 0.95 & 64.51 & 0.686 & 0.712 & 0.630 & 15.92 & 106.89 \\" in tex
    assert tex.count(r"\\") == 2 + 2


def test_through_an_index_built_from_imported_and_local_runs(tmp_path):
    """import-praco logs a run, the index picks it up, the table reads the counters view."""
    from tests.fixtures.praco_release import MODEL, write_release

    from countboard.counting.released.importer import import_praco
    from countboard.index.builder import build_index
    from countboard.index.reader import connect_readonly
    from countboard.tracking.store import open_store

    release = write_release(tmp_path / "rel")
    tracker = open_store(str(tmp_path / "mlruns"), create=True)
    result = import_praco(release["model_dir"], release["meta"], tracker, exclude=release["exclude"])
    build_index(tracker.uri, tmp_path / "index.duckdb")
    rows = connect_readonly(tmp_path / "index.duckdb").execute("SELECT * FROM counters").df()
    table = praco_table(rows, convention="released").set_index("Method")
    metrics = result.scored.metrics
    assert table.loc[MODEL, "CntR"] == pytest.approx(metrics["official_avg_cnt_recall"])
    assert table.loc[MODEL, "NMN"] == pytest.approx(metrics["official_avg_nmn"])
    assert praco_table(rows).set_index("Method").loc[MODEL, "CntR"] == pytest.approx(metrics["cnt_recall"])


def test_one_protocol_per_test_stated_in_the_caption():
    from countboard.index.praco_table import task_protocols

    rows = _rows().assign(protocol_label="default")
    official = {"dataset": "fsc147", "split": "test", "is_latest": True, "model": "dave", "task": "praco_mosaic",
                "end_time": 10, "cnt_precision": 0.4873, "protocol_label": "mosaic=official"}
    rows = pd.concat([rows, pd.DataFrame([official])], ignore_index=True)
    assert task_protocols(rows)["praco_mosaic"] == ["default", "mosaic=official"]
    assert praco_table(rows).set_index("Method").loc["dave", "CntP"] == 0.843  # the default protocol
    chosen = praco_table(rows, protocols={"praco_mosaic": "mosaic=official"}).set_index("Method")
    assert chosen.loc["dave", "CntP"] == 0.4873 and chosen.loc["dave", "NMN"] == 0.08
    assert praco_caption("paper", "test", protocols={"praco_mosaic": "mosaic=official", "praco_negative":
                                                     "default"}).endswith(
        "protocol: mosaic test with mosaic=official, the other tests with their defaults.")
    assert praco_caption("paper", "test").endswith("every test with its default protocol.")
