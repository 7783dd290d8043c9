"""The publication's pure parts: escaping, JSON in pages, CSV, box statistics, file names, the papers' references
and the comparison of two publications."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert set(refs.family) == {"counters", "generators", "generator_autometrics", "grounding"}
    dave = refs[(refs.model == "DAVE") & (refs.split == "test") & (refs.metric == "cnt_f1")]
    assert dave.value.tolist() == [0.790] and dave.table.tolist() == ["Table 1"]  # PrACo Table 1, DAVE, CntF1
    dalle = refs[(refs.row == "DALL·E 3") & (refs.task == "geckonum_human_t1")]
    assert dalle.expected.tolist() == [pytest.approx(0.452)]  # GeckoNum Table 2 prints 45.2 (%)


SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"


def _seed(name: str) -> list[str]:
    path = SEEDS / name
    if not path.is_file():
        pytest.skip(f"seed text not found at {path}")
    return path.read_text(encoding="utf-8").splitlines()


def test_q_groundcam_rows_are_the_seed_table_rows():
    """Every metric of Q-GroundCAM Table 1, per dataset and model, read back from the seed text's own lines."""
    lines = _seed("q_groundcam.txt")
    refs = references.load()
    q = refs[refs.paper.str.startswith("Q-GroundCAM")]
    assert len(q) == 6 * 4 * 9  # 6 settings x 4 models x 9 columns
    assert set(q.metric) == {"iou_soft", "iou_binary", "dice_soft", "dice_binary", "wdp", "wdp_binary", "io_ratio",
                             "pg_accuracy", "pg_uncertainty"}
    albef_flickr = next(line for line in lines if line.startswith("ALBEFAMC 0.19"))  # Flickr30K block, 4th model
    assert albef_flickr.split()[1:9] == ["0.19", "0.16", "0.31", "0.25", "0.86", "0.60", "0.62", "87.69"]
    row = q[q.row == "Flickr30K Entities (test), ALBEFAMC"].set_index("metric")
    assert row.loc["wdp", "value"] == 0.86 and row.loc["wdp_binary", "value"] == 0.60
    assert row.loc["io_ratio", "value"] == 0.62 and row.loc["pg_accuracy", "expected"] == pytest.approx(0.8769)
    assert "10 / 14481" in albef_flickr and row.loc["pg_uncertainty", "expected"] == pytest.approx(10 / 14481)
    blip_b = lines[lines.index(next(line for line in lines if line.startswith("(testB) BLIPlarge"))) - 1]
    assert blip_b.startswith("RefCOCO+ BLIPbase") and "0.98 0.86 0.31 46.96 201 / 4889" in blip_b
    testb = q[q.row == "RefCOCO+ (testB), BLIPbase"].set_index("metric")
    assert (testb.loc["wdp_binary", "value"], testb.loc["io_ratio", "value"]) == (0.86, 0.31)
    assert testb.loc["pg_uncertainty", "expected"] == pytest.approx(201 / 4889)
    assert testb.loc["pg_uncertainty", "dataset"] == "refcoco_plus_testb" and testb.loc["wdp", "split"] == "testB"
    objects = next(line for line in lines if line.startswith("(objects) BLIPlarge"))
    assert "0.12 0.08 0.21 0.13 0.92 0.74 0.40 54.55 158 / 1811" in objects
    obj = q[(q.model == "blip_large_gradcam") & (q.dataset == "spatialsense_object")].set_index("metric")
    assert obj.loc["wdp", "value"] == 0.92 and obj.loc["pg_uncertainty", "value"] == 158


def test_geckonum_table3_marks_are_the_seed_rows_marks():
    """DALL·E 3's Table 3 row keeps four = (CLIP, TIFA, Gecko, DSG; VNLI alone ✓): typed as p >= 0.05 for the
    three metrics the index has; the rows whose ✓ signs the seed text lost are not typed."""
    lines = _seed("geckonum_numerical_reasoning.txt")
    head = next(i for i, line in enumerate(lines) if line.startswith("Table 3: The ability of auto-metrics"))
    assert lines[head + 1].split() == ["CLIP", "TIFA", "Gecko", "DSG", "VNLI"]
    assert lines[head + 4].split() == ["DALL·E", "3", "=", "=", "=", "="]
    refs = references.load()
    t3 = refs[refs.table == "Table 3"]
    assert sorted(t3.metric) == ["autometrics_clipscore_p_value", "autometrics_dsg_p_value",
                                 "autometrics_tifa_p_value"]
    assert set(t3.row) == {"DALL·E 3"} and set(t3.relation) == {">="} and set(t3.expected) == {0.05}
    schema = load_schema()
    p = "autometrics_clipscore_p_value"
    rows = pd.DataFrame({"entry_id": ["e1", "e2"], "model": ["dalle_3", "imagen_c"], p: [0.001, 0.3]})
    auc = schema.metrics["autometrics_clipscore_auroc"]
    table = RankedTable("k", "generator_autometrics", "geckonum_prompts", None, {"protocol_label": "default"}, auc,
                        None, None, [], rows)
    got = references.compare(table, schema)
    assert got.model.tolist() == ["dalle_3"]  # imagen_c has no typed mark
    clip = got.iloc[0]
    assert clip.outside_interval and clip.paper_shown == "= (p ≥ 0.05)" and np.isnan(clip.difference)
    assert references.verdict(clip.to_dict()) == ("disagrees with our p-value", True)
    table.rows = rows.assign(**{p: [0.2, 0.3]})
    assert references.verdict(references.compare(table, schema).iloc[0].to_dict()) == ("agrees", False)


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


class _Reader:
    """The four provenance queries answered from frames."""

    def __init__(self, tags: list[tuple[str, str, str]]):
        self.tags = pd.DataFrame(tags, columns=["run_id", "key", "value"])

    def df(self, sql, params=()):
        if "FROM runs" in sql:
            return pd.DataFrame({"run_id": ["r1", "r2"], "run_name": ["a", "b"], "experiment_id": ["1", "1"],
                                 "experiment": ["e", "e"], "status": ["FINISHED"] * 2, "model": ["m", "m"],
                                 "dataset": ["d", "d"], "split": ["s", "s"], "task": ["t", "t"],
                                 "start_time": [pd.NaT] * 2, "end_time": [pd.NaT] * 2})
        if "FROM tags" in sql:
            return self.tags
        return pd.DataFrame({"run_id": [], "key": [], "value": []})


def test_entry_pages_show_the_library_versions_a_run_was_tagged_with():
    from countboard.publish import pages
    from countboard.publish.collect import Entry
    from countboard.publish.provenance import provenance
    from countboard.tracking import tags as tg

    versions = tg.library_versions()
    assert all(k.startswith(tg.LIBRARY_VERSION_PREFIX) for k in versions) and versions
    tagged = [("r1", k, v) for k, v in versions.items()] + [("r1", tg.COUNTBOARD_VERSION, "0.1.0")]
    runs = provenance(_Reader(tagged), ["r1", "r2"])
    assert dict(runs["r1"].versions) == {k.removeprefix(tg.LIBRARY_VERSION_PREFIX): v for k, v in versions.items()}
    assert ("countboard version", "0.1.0") in runs["r1"].fields and runs["r2"].versions == []
    entry = Entry("e", "counters", "m", "d", "s", {}, ["r1", "r2"], {}, "t", "1", "1")
    html = pages.entry_body(entry, [runs["r1"], runs["r2"]], "../t.html", load_schema())
    torch = versions.get(f"{tg.LIBRARY_VERSION_PREFIX}torch")
    assert torch and f"torch <code>{torch}</code>" in html
    assert "not recorded in the run's tags" in html  # r2 has none
