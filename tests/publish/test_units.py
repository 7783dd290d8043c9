"""The publication's pure parts: escaping, JSON in pages, CSV, box statistics, file names, the papers' references
and the comparison of two publications."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from countboard.errors import ConfigError
from countboard.publish import machine, references
from countboard.publish.collect import RankedTable, box_stats, entry_id, slug
from countboard.publish.render import clean, esc, fmt, json_script
from countboard.schema import load_schema


def test_escaping_and_json_in_a_script_element():
    assert esc('<a href="x">&\'') == "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"
    text = json_script({"name": "</script><script>alert(1)</script>", "v": 1.5})
    assert "<" not in text and ">" not in text and json.loads(text)["name"].startswith("</script>")
    assert clean({"a": np.float64("nan"), "b": [np.int64(2), float("inf")]}) == {"a": None, "b": [2, None]}
    assert fmt(2.4, "d") == "2" and fmt(None) == "—"


def test_box_statistics_against_numpy():
    rng = np.random.default_rng(0)
    v = rng.normal(size=101)
    s = box_stats(list(v) + [np.nan])
    q1, q3 = np.quantile(v, [0.25, 0.75])
    assert s["q1"] == pytest.approx(q1) and s["median"] == pytest.approx(np.median(v)) and s["n"] == 101
    inside = v[(v >= q1 - 1.5 * (q3 - q1)) & (v <= q3 + 1.5 * (q3 - q1))]
    assert s["lowerfence"] == inside.min() and s["upperfence"] == inside.max()
    assert box_stats([np.nan]) is None


def test_file_names_and_entry_ids_are_stable_and_distinct():
    assert slug("counters", "fsc147", "test") == "counters__fsc147__test"
    assert slug("a/b", "c") != slug("a-b", "c") and "/" not in slug("a/b", "c")
    row = {"model": "m", "dataset": "d", "split": "s", "evaluator": None, "protocol_label": "default", "task": "t"}
    assert entry_id("f", row, False) == entry_id("f", {**row, "task": "other"}, False)
    assert entry_id("f", row, True) != entry_id("f", {**row, "task": "other"}, True)
    assert entry_id("f", row, False) == entry_id("f", {**row, "evaluator": float("nan")}, False)


def test_references_name_their_source_and_a_schema_metric():
    refs = references.load()
    schema = load_schema()
    assert len(refs) > 100 and refs[["paper", "table", "row", "column"]].ne("").all().all()
    assert set(refs.metric) <= set(schema.metrics)
    assert set(refs.family) == {"counters", "generators", "grounding"}
    dave = refs[(refs.model == "DAVE") & (refs.split == "test") & (refs.metric == "cnt_f1")]
    assert dave.value.tolist() == [0.790] and dave.table.tolist() == ["Table 1"]  # PrACo Table 1, DAVE, CntF1
    dalle = refs[(refs.row == "DALL·E 3") & (refs.task == "geckonum_human_t1")]
    assert dalle.expected.tolist() == [pytest.approx(0.452)]  # GeckoNum Table 2 prints 45.2 (%)


def _table(rows: pd.DataFrame, split: str = "test") -> RankedTable:
    schema = load_schema()
    f1 = schema.metrics["cnt_f1"]
    return RankedTable("k", "counters", "fsc147", split, {"protocol_label": "default"}, f1, f1.interval, None, [],
                       rows)


def test_references_beside_the_measured_entry_with_the_difference_and_a_flag():
    iv = load_schema().metrics["cnt_f1"].interval
    rows = pd.DataFrame({"entry_id": ["e1", "e2", "e3"], "model": ["dave", "CLIP_Count", "other"],
                         "cnt_f1": [0.80, 0.40, 0.5], iv.low: [0.78, 0.35, 0.4], iv.high: [0.82, 0.45, 0.6],
                         "mae": [15.0, 17.0, 1.0]})
    got = references.compare(_table(rows), load_schema()).set_index(["model", "metric"])
    assert sorted(got.index) == [("CLIP_Count", "cnt_f1"), ("CLIP_Count", "mae"), ("dave", "cnt_f1"),
                                 ("dave", "mae")]
    dave = got.loc[("dave", "cnt_f1")]
    assert dave.paper_value == 0.790 and dave.difference == pytest.approx(0.01) and not dave.outside_interval
    clip = got.loc[("CLIP_Count", "cnt_f1")]  # the paper's 0.554 lies above our [0.35, 0.45]
    assert clip.outside_interval and clip.difference == pytest.approx(0.40 - 0.554)
    assert not got.loc[("dave", "mae")].outside_interval  # no MAE bounds fetched: never flagged
    assert "Table 1, row DAVE, column CntF1" in dave.source
    val = references.compare(_table(rows, split="val"), load_schema()).set_index(["model", "metric"])
    assert val.loc[("dave", "cnt_f1"), "paper_value"] == 0.757  # PrACo Table 2 (validation)
    other = _table(rows)
    other.context = {"protocol_label": "mosaic=official"}
    assert references.compare(other, load_schema()).empty  # another protocol is not the paper's


def _manifest(folder, entries):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / machine.MANIFEST).write_text(machine.dumps({"schema": machine.SITE_SCHEMA,
                                                          "schema_version": machine.SCHEMA_VERSION,
                                                          "entries": entries, "tables": []}))
    return folder


def _entry(model, rank, group, **values):
    return {"family": "counters", "model": model, "dataset": "fsc147", "split": "test",
            "context": {"protocol_label": "default"}, "run_ids": ["r"], "table": "t", "rank": rank,
            "tie_group": group, "values": values}


def test_compare_names_new_removed_moved_and_changed(tmp_path):
    old = _manifest(tmp_path / "old", {"a": _entry("A", "1", "1", cnt_f1=0.9), "b": _entry("B", "2", "2", cnt_f1=0.5),
                                       "c": _entry("C", "3", "3", cnt_f1=0.1)})
    new = _manifest(tmp_path / "new", {"a": _entry("A", "1–2", "1", cnt_f1=0.9 + 1e-14),
                                       "b": _entry("B", "1–2", "1", cnt_f1=0.85), "d": _entry("D", "3", "2")})
    ch = machine.compare_sites(old, new)
    assert [x.split(":")[0] for x in ch.new] == ["counters · D · fsc147 · test · protocol_label=default"]
    assert len(ch.removed) == 1 and "· C ·" in ch.removed[0]
    assert len(ch.moved) == 2 and any("rank 2 → 1–2, tie group 2 → 1" in x for x in ch.moved)
    assert ch.changed == ["counters · B · fsc147 · test · protocol_label=default: cnt_f1 0.5 → 0.85"]
    assert machine.compare_sites(old, old).lines() == ["no change: the same entries, ranks and values"]
    with pytest.raises(ConfigError, match="not a publication"):
        machine.compare_sites(tmp_path / "nothing", new)


def test_csv_and_json_of_a_table():
    frame = pd.DataFrame({"model": ["a", None], "v": [0.25, float("nan")], "ids": [["r1", "r2"], ["r3"]]})
    data = json.loads(machine.table_json("k", "ranking", frame, {"family": "f"}))
    assert data["schema"] == machine.TABLE_SCHEMA and data["schema_version"] == machine.SCHEMA_VERSION
    assert data["rows"] == [{"model": "a", "v": 0.25, "ids": ["r1", "r2"]}, {"model": None, "v": None, "ids": ["r3"]}]
    assert machine.table_csv(frame[["model", "v"]]) == "model,v\na,0.25\n,\n"
