"""The papers' numbers beside the board's ranking: the same reference rows, matching and flag rule as the site."""

from __future__ import annotations

import pandas as pd
import pytest
from tests.fixtures.board import app_test
from tests.fixtures.synthetic_store import FamilySpec, make_store

import paper_values
from countboard.index import build_index
from countboard.publish import references
from countboard.schema import load_schema

F1 = {"cnt_f1": True, "cnt_f1__low": None, "cnt_f1__high": None, "mae": False}


@pytest.fixture(scope="module")
def praco_counters(tmp_path_factory):
    """Two counters named as PrACo Table 1's (DAVE, CLIP-Count) and one it does not report, on FSC-147 test."""
    root = tmp_path_factory.mktemp("paper_values")
    specs = [FamilySpec("counters", F1, ["DAVE", "clip_count", "not_in_a_paper"], ["fsc147"])]
    store = make_store(root, specs, seed=5, with_artifacts=False)
    build_index(store.uri, root / "index.duckdb")
    return store, root / "index.duckdb"


def test_the_board_shows_the_papers_values_beside_ours(monkeypatch, praco_counters):
    store, db = praco_counters
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(db))
    at = app_test("views/counters.py", section="counters").run()
    assert not at.exception, [e.value for e in at.exception]
    grid = next(d for d in at.dataframe if "against ours" in d.value.columns).value
    assert sorted(set(grid.model)) == ["DAVE", "clip_count"]  # the third model is in no paper
    ours = store.values.set_index("model")
    dave = grid[(grid.model == "DAVE") & (grid.metric == "CntF1")].iloc[0]
    assert dave.paper == "0.79" and "Table 1, row DAVE, column CntF1" in dave.source
    value, low, high = (float(ours.loc["DAVE", k]) for k in ("cnt_f1", "cnt_f1__low", "cnt_f1__high"))
    assert dave.ours == f"{value:.4g}" and dave.difference == f"{value - 0.79:+.4g}"
    assert dave.loc["our interval"] == f"[{low:.4g}, {high:.4g}]"
    assert dave.loc["against ours"] == ("inside" if low <= 0.79 <= high else "⚠ outside our interval")
    mae = grid[(grid.model == "clip_count") & (grid.metric == "MAE")].iloc[0]
    assert mae.paper == "17.59" and mae.loc["against ours"] == "no interval"  # MAE has no declared interval


def test_board_and_site_use_one_rule():
    schema = load_schema()
    rows = pd.DataFrame({"model": ["DAVE", "DAVE"], "dataset": ["fsc147", "fsc147"], "split": ["test", "val"],
                         "protocol_label": ["default", "default"], "run_id": ["r1", "r2"], "cnt_f1": [0.5, 0.757],
                         "cnt_f1__low": [0.45, 0.74], "cnt_f1__high": [0.55, 0.77]})
    frame = paper_values.reference_frame("counters", rows, schema).set_index("ours")
    assert frame.loc["0.5", "against ours"] == "⚠ outside our interval"  # Table 1 (test): 0.790 above [0.45, 0.55]
    assert frame.loc["0.757", "against ours"] == "inside"  # Table 2 (validation): 0.757
    site = references.compare_rows("counters", rows, schema)
    assert [references.verdict(r)[1] for r in site.to_dict("records")] == [True, False]
    other = rows.assign(protocol_label="mosaic=official")
    assert paper_values.reference_frame("counters", other, schema).empty  # another protocol is not the paper's
