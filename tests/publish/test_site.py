"""``build_site`` on a small store: every family published, byte-identical twice, escaped, tables as CSV and JSON
that say what the pages say, provenance on entry pages, and the board's ranks."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from countboard.errors import ConfigError
from countboard.publish import Options, build_site
from countboard.publish.machine import SCHEMA_VERSION
from countboard.quantify.ranks import rank_label, rank_ranges, tie_groups
from countboard.schema import load_schema
from tests.publish.conftest import HOSTILE

# each test builds a store and publishes it (seconds each on two busy cores)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(small_index, tmp_path_factory):
    _, db = small_index
    out = tmp_path_factory.mktemp("site") / "site"
    report = build_site(db, out, Options(title="Lab board"))
    return out, report


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_same_index_gives_the_same_bytes(site, small_index, tmp_path):
    out, _ = site
    again = build_site(small_index[1], tmp_path / "again", Options(title="Lab board"))
    first, second = _files(out), _files(again.out)
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []


def test_every_family_has_a_page_and_a_benchmark_page(site):
    out, report = site
    manifest = json.loads((out / "site.json").read_text())
    families = {e["family"] for e in manifest["entries"].values()}
    expected = {f.key for f in load_schema().families.values() if f.page}
    assert families == expected
    for fam in expected:
        assert (out / "families" / f"{fam}.html").is_file()
    benches = {p.name for p in (out / "benchmarks").glob("*.html")}
    assert {"counters__fsc147__test.html", "counters__carpk__test.html"} <= benches
    index = (out / "index.html").read_text()
    for name in benches:
        assert f'href="benchmarks/{name}"' in index
    assert report.entries == len(manifest["entries"]) and report.pages == len(list(out.rglob("*.html")))


def test_links_stay_inside_the_site_and_scripts_are_shipped(site):
    out, _ = site
    for page in out.rglob("*.html"):
        text = page.read_text()
        for ref in re.findall(r'(?:href|src)="([^"]+)"', text):
            assert "://" not in ref and not ref.startswith("//"), (page, ref)
            target = (page.parent / ref.split("#")[0]).resolve()
            assert target.is_file(), (page, ref)
    assert (out / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    assert sum("plotly.min.js" in p.name for p in out.rglob("*")) == 1  # shipped once


def test_rankings_are_the_board_rule_with_tie_groups(site):
    out, _ = site
    manifest = json.loads((out / "site.json").read_text())
    rankings = [t for t in manifest["tables"] if t["kind"] == "ranking"]
    assert rankings
    for t in rankings:
        data = json.loads((out / t["json"]).read_text())
        assert data["schema_version"] == SCHEMA_VERSION and data["kind"] == "ranking"
        rows = pd.DataFrame(data["rows"], columns=data["columns"])
        higher = t["higher_is_better"] is not False
        v = rows[t["sort"]].astype(float).to_numpy()
        if t["interval"]:
            low, high = (rows[c].astype(float).to_numpy() for c in t["interval"][:2])
            best, worst = rank_ranges(v, low, high, higher)
            assert rows["rank"].tolist() == [rank_label(b, w) for b, w in zip(best, worst, strict=True)]
            assert rows["tie_group"].tolist() == tie_groups(v, low, high, higher).tolist()
        ordered = v[~np.isnan(v)]
        assert (np.diff(ordered) <= 0).all() if higher else (np.diff(ordered) >= 0).all()
        csv = pd.read_csv(out / t["csv"])
        assert len(csv) == len(rows) and list(csv.columns) == data["columns"]


def test_entry_pages_carry_provenance(site, small_index):
    out, _ = site
    store, _ = small_index
    manifest = json.loads((out / "site.json").read_text())
    eid, entry = next(iter(sorted(manifest["entries"].items())))
    text = (out / "entries" / f"{eid}.html").read_text()
    for run in entry["run_ids"]:
        assert run in text and run in store.run_ids
    for label in ("MLflow run id", "config hash", "git commit", "countboard version", "dataset digest", "device",
                  "precision", "library versions"):
        assert label in text
    assert "0" * 40 in text  # the store's git commit
    assert "Config (" in text


def test_the_benchmark_page_draws_intervals_pairwise_and_drift(site):
    out, _ = site
    text = (out / "benchmarks" / "counters__fsc147__test.html").read_text()
    charts = re.findall(r'<script type="application/json" data-chart="([^"]+)">(.*?)</script>', text, re.S)
    assert {c.split("-")[0] for c, _ in charts} == {"iv", "pw", "dr"}
    for _, spec in charts:
        assert json.loads(spec)["data"]
    assert "Chatbot Arena" in text and "tie group" in text.lower()
    assert '<script src="../assets/plotly.min.js"></script>' in text
    imgs = list((out / "img").glob("*.png"))
    assert imgs
    from PIL import Image

    for p in imgs:
        with Image.open(p) as im:
            assert max(im.size) <= 320


def test_store_strings_are_escaped(hostile_index, tmp_path):
    _, db = hostile_index
    report = build_site(db, tmp_path / "site", Options(title='<b>"Lab"</b>'))
    pages = [p.read_text() for p in report.out.rglob("*.html")]
    assert not any("<img src=x" in p or "<b>\"Lab\"" in p for p in pages)
    assert any("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;amp;" in p for p in pages)
    for p in pages:  # the JSON of a chart cannot close its script element
        for spec in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', p, re.S):
            assert "<" not in spec
    manifest = json.loads((report.out / "site.json").read_text())
    assert HOSTILE in {e["model"] for e in manifest["entries"].values()}


def test_family_and_dataset_options_narrow_the_site(small_index, tmp_path):
    report = build_site(small_index[1], tmp_path / "s", Options(families=("counters",), datasets=("carpk",)))
    manifest = json.loads((report.out / "site.json").read_text())
    assert {(e["family"], e["dataset"]) for e in manifest["entries"].values()} == {("counters", "carpk")}
    with pytest.raises(ConfigError, match="not a family"):
        build_site(small_index[1], tmp_path / "t", Options(families=("nope",)))


def test_a_folder_that_is_not_a_publication_is_never_replaced(small_index, tmp_path):
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a publication"):
        build_site(small_index[1], keep, Options())
    assert (keep / "notes.txt").read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["mine"]


def test_a_second_publication_replaces_the_first_whole(small_index, tmp_path):
    out = tmp_path / "site"
    build_site(small_index[1], out, Options())
    (out / "entries" / "stale.html").write_text("old")
    build_site(small_index[1], out, Options(families=("counters",)))
    assert not (out / "entries" / "stale.html").exists()
    assert not (out / "families" / "acs.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_the_command_publishes_and_compares(hostile_index, tmp_path, capsys):
    from countboard.cli import main

    store, db = hostile_index
    first = tmp_path / "first"
    args = ["publish", "--store", str(store.store_dir), "--db", str(db), "--no-index", "--family", "counters"]
    assert main([*args, str(first)]) == 0
    assert "published" in capsys.readouterr().out and (first / "index.html").is_file()
    assert main([*args, str(tmp_path / "second"), "--compare", str(first)]) == 0
    assert "no change: the same entries, ranks and values" in capsys.readouterr().out
    narrower = tmp_path / "narrower"
    assert main([*args, str(narrower), "--dataset", "nope"]) == 0
    capsys.readouterr()
    assert main(["publish", str(narrower), "--compare", str(first), "--compare-only"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0 new, 2 removed") and out.count("removed  counters") == 2
    assert main(["publish", str(tmp_path / "x"), "--compare", str(tmp_path / "none"), "--compare-only"]) == 2
    assert "not a publication" in capsys.readouterr().err
