"""Every page of the app, through Streamlit's AppTest, on a filled index, an empty one and a missing one."""

from __future__ import annotations

import json
import socket

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from tests.fixtures.board import app_test

from countboard.paths import leaderboard_dir
from countboard.schema import load_schema

APP = leaderboard_dir() / "app.py"

PAGES = ("views/overview.py", "views/counters.py", "views/numeracy.py", "views/acs.py", "views/grounding.py", "views/runs.py")
UI = "http://mlflow.example:5000"


def open_page(monkeypatch, db, page: str, section: str | None = None) -> AppTest:
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(db))
    monkeypatch.setenv("COUNTBOARD_MLFLOW_UI", UI)
    return app_test(page, section=section).run()


def families_with_pages() -> list[tuple[str, str]]:
    """(family, page file) for every schema family the leaderboard shows."""
    return [(f.key, f"views/{f.page}.py") for f in load_schema().families.values() if f.page]


def expected_ranking(values: pd.DataFrame, family: str, key: str, by_evaluator: bool) -> pd.DataFrame:
    """Independent of the app: group the values logged into the store by dataset and split (and evaluator), sort
    each group by the schema's direction."""
    higher = load_schema().metrics[key].higher_is_better is not False
    groups = ["dataset", "split", *(["evaluator"] if by_evaluator else [])]
    part = values[values.family == family]
    part = part.sort_values([*groups, key, "model", "run_id"], ascending=[True] * len(groups) + [not higher, True, True])
    return part.reset_index(drop=True).assign(rank=lambda d: d.groupby(groups).cumcount() + 1)


def ranking_tables(at: AppTest, family: str) -> list[pd.DataFrame]:
    """The tables on the page that rank the entries of ``family`` (synthetic model names start with its key)."""
    return [df.value for df in at.dataframe
            if "model" in df.value and len(df.value) and df.value.model.str.startswith(f"{family}_model_").all()]


def family_table(at: AppTest, family: str) -> pd.DataFrame:
    """The ranking table of ``family`` on the page (synthetic model names start with the family key): one table,
    never followed by a table of the same entries' other columns."""
    tables = [df.value for df in at.dataframe]
    for i, table in enumerate(tables):
        if "model" in table and len(table) and table.model.str.startswith(f"{family}_model_").all():
            for more in tables[i + 1:]:
                assert not ("model" in more and more.model.equals(table.model)), "the ranking is split in two tables"
            return table
    raise AssertionError(f"no ranking table of family {family!r} on the page")


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_error(monkeypatch, filled_index, page):
    _, db = filled_index
    at = open_page(monkeypatch, db, page)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert len(at.dataframe) >= 1 or page.endswith("overview.py")
    assert all(len(df.value.columns) > 1 for df in at.dataframe), [list(df.value.columns) for df in at.dataframe]


@pytest.mark.parametrize(("family", "page"), families_with_pages())
def test_ranking_follows_the_main_metric(monkeypatch, filled_index, family, page):
    store, db = filled_index
    at = open_page(monkeypatch, db, page, section=family)
    table = family_table(at, family)
    main = load_schema().families[family].main_metric
    expected = expected_ranking(store.values, family, main, by_evaluator="evaluator" in table)
    assert list(table.model) == list(expected.model)
    np.testing.assert_allclose(table[main].to_numpy(dtype=float), expected[main].to_numpy(dtype=float))
    assert list(table["rank"]) == [str(r) for r in expected["rank"]]
    assert all(link.startswith(f"{UI}/#/experiments/{store.experiment_id}/runs/") for link in table.run)


@pytest.mark.parametrize(("family", "page"), families_with_pages())
def test_a_section_shows_one_ranking_table_and_no_one_column_table(monkeypatch, filled_index, family, page):
    """Issue 33: wide rankings were split by a fixed width, the Numeracy ranking into 8 columns and a second table
    of "Images" alone. A section ranks in one table, rank and model pinned, every column of the ranking in it; no
    table on the page has a single column."""
    _, db = filled_index
    at = open_page(monkeypatch, db, page, section=family)
    assert not at.exception, [e.value for e in at.exception]
    tables = ranking_tables(at, family)
    assert len(tables) == 1, [list(t.columns) for t in tables]
    assert list(tables[0].columns[:2]) == ["rank", "model"]
    main = load_schema().families[family].main_metric
    assert main in tables[0] and "run" in tables[0]
    shapes = [list(df.value.columns) for df in at.dataframe]
    assert all(len(cols) > 1 for cols in shapes), shapes
    shown = next(df for df in at.dataframe if df.value.equals(tables[0]))
    config = json.loads(shown.proto.columns)
    assert all(config[key].get("pinned") for key in ("rank", "model")), config


def test_ranking_by_a_lower_is_better_metric_is_ascending(monkeypatch, filled_index):
    store, db = filled_index
    family = "counters"
    if family not in load_schema().families:
        pytest.skip("family `counters` is not declared in countboard/schema/*.yaml")
    lower = next(m.key for m in load_schema().family_metrics(family) if m.higher_is_better is False)
    at = open_page(monkeypatch, db, "views/counters.py")
    at.selectbox(key="f_counters_sort").set_value(lower).run()
    table = family_table(at, family)
    expected = expected_ranking(store.values, family, lower, by_evaluator=False)
    assert list(table.model) == list(expected.model)
    assert "dataset" not in table  # one dataset and split: named in the caption instead of on every row
    assert any("on dataset fsc147 · split test" in c.value for c in at.caption)
    assert list(table[lower]) == sorted(table[lower])


def test_dataset_filter_keeps_only_that_dataset(monkeypatch, filled_index):
    store, db = filled_index
    family, page = families_with_pages()[0]
    at = open_page(monkeypatch, db, page, section=family)
    at.selectbox(key=f"f_{family}_dataset").set_value("carpk").run()
    table = family_table(at, family)
    assert "dataset" not in table and any("on dataset carpk" in c.value for c in at.caption)
    assert len(table) == ((store.values.family == family) & (store.values.dataset == "carpk")).sum()


@pytest.mark.parametrize("page", PAGES)
def test_empty_store_explains_how_to_launch_a_sweep(monkeypatch, empty_index, page):
    store, db = empty_index
    at = open_page(monkeypatch, db, page)
    assert not at.exception and not at.error
    text = " ".join(i.value for i in at.info)
    assert "countboard-sweep" in text and "countboard index" in text
    # the store this page reads, not a hard-coded ./mlruns
    assert f"tracking.store_dir={store.store_dir}" in text and f"--store {store.store_dir}" in text, text
    assert "store_dir=mlruns" not in text


def test_overview_counts_finished_runs_per_family(monkeypatch, filled_index):
    store, db = filled_index
    at = open_page(monkeypatch, db, "views/overview.py")
    labels = [e.proto.label for e in at.get("page_link")]
    captions = [c.value for c in at.caption]
    for family, runs in store.values.groupby("family"):
        display = load_schema().families[family].display
        entries = len(runs.drop_duplicates(["model", "dataset", "split", "evaluator"]))
        assert f"{display}: {entries} entries" in labels, labels
        assert any(c.startswith(f"Ranked from {len(runs)} complete finished runs.") for c in captions), captions


def test_missing_index_says_to_build_it(monkeypatch, tmp_path):
    at = open_page(monkeypatch, tmp_path / "absent.duckdb", "views/counters.py")
    assert not at.exception and not at.error
    assert "countboard index" in " ".join(c.value for c in at.caption) + " ".join(i.value for i in at.info)


def test_runs_page_search_finds_one_model(monkeypatch, filled_index):
    store, db = filled_index
    model = store.values.model.iloc[0]
    at = open_page(monkeypatch, db, "views/runs.py")
    at.text_input(key="runs_search").set_value(model).run()
    table = at.dataframe[0].value
    assert set(table.model) == {model}
    assert len(table) == (store.values.model == model).sum()
    assert table.link.iloc[0] == (f"{UI}/#/experiments/{store.experiment_id}/runs/{table.run_id.iloc[0]}"
                                  "?workflowType=machine_learning")


def test_runs_page_links_to_the_running_mlflow_ui_and_says_when_none_answers(monkeypatch, filled_index):
    import http.server
    import threading

    from countboard.index import ui_address

    store, db = filled_index
    monkeypatch.setenv("COUNTBOARD_STORE", str(store.store_dir))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        silent = f"http://127.0.0.1:{s.getsockname()[1]}"
    ui_address.record_served(store.uri, silent)  # as `countboard mlflow-ui --port N` records it
    try:
        at = open_page(monkeypatch, db, "views/runs.py")
        table = at.dataframe[0].value
        assert table.link.iloc[0].startswith(f"{silent}/#/experiments/")  # not the setting ($COUNTBOARD_MLFLOW_UI)
        captions = " ".join(c.value for c in at.caption)
        assert f"links open the MLflow UI at {silent} (served by countboard mlflow-ui)" in captions
        assert any(f"No MLflow UI answers at {silent}" in w.value for w in at.warning)

        server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            live = f"http://127.0.0.1:{server.server_address[1]}"
            ui_address.record_served(store.uri, live)
            at = open_page(monkeypatch, db, "views/runs.py")
            assert f"at {live} (served by" in " ".join(c.value for c in at.caption)
            assert not any("No MLflow UI answers" in w.value for w in at.warning)
        finally:
            server.shutdown()
    finally:
        ui_address.forget_served(store.uri)
    at = open_page(monkeypatch, db, "views/runs.py")  # no UI running: the setting
    assert f"at {UI} ($COUNTBOARD_MLFLOW_UI)" in " ".join(c.value for c in at.caption)


def test_annotation_page_stores_answers_and_resumes(monkeypatch, filled_index, tmp_path):
    store, db = filled_index
    if not any("autoeval" in f for f in load_schema().families):
        pytest.skip("no auto-evaluated generator family in the schema")
    labels = tmp_path / "labels.duckdb"
    monkeypatch.setenv("COUNTBOARD_LABELS_DB", str(labels))
    at = open_page(monkeypatch, db, "views/annotate.py")
    assert not at.exception and "annotator id" in " ".join(i.value for i in at.info)
    at.text_input(key="annotate_annot").set_value("ann1").run()
    assert [p.proto.text for p in at.get("progress")] == ["0 of 3 questions answered"]
    assert len(at.get("image")) == 1
    at.text_input(key="annotate_answer").set_value("three")
    at.button(key="FormSubmitter:annotate_form-Save and next").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [p.proto.text for p in at.get("progress")] == ["1 of 3 questions answered"]
    at.text_input(key="annotate_answer").set_value("lots")
    at.button(key="FormSubmitter:annotate_form-Save and next").click().run()
    assert "Not saved" in " ".join(w.value for w in at.warning)
    again = open_page(monkeypatch, db, "views/annotate.py")
    again.text_input(key="annotate_annot").set_value("ann1").run()
    assert [p.proto.text for p in again.get("progress")] == ["1 of 3 questions answered"]
    from countboard.numeracy.annotation import LabelStore

    answers = LabelStore(labels).labels(again.selectbox(key="annotate_run").value)
    assert list(answers.answer) == [3.0] and list(answers.annot_id) == ["ann1"]


@pytest.mark.parametrize("page", PAGES)
def test_index_of_an_older_schema_asks_for_a_rebuild(monkeypatch, tmp_path, page):
    import duckdb

    db = tmp_path / "old.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    at = open_page(monkeypatch, db, page)
    assert not at.exception and not at.error
    warning = " ".join(w.value for w in at.warning)
    assert "schema version 1" in warning and "countboard index" in warning


@pytest.mark.slow  # a store of its own and two pages: about 20 s on 2 busy cores
def test_a_metric_a_run_could_not_compute_is_shown_with_its_reason(monkeypatch, tmp_path):
    from mlflow.tracking import MlflowClient
    from tests.fixtures.synthetic_store import make_store, specs_from_schema

    from countboard.index import build_index
    from countboard.tracking import tags as tg

    specs = [s for s in specs_from_schema(models_per_family=2, datasets=("fsc147",)) if s.family == "counters"]
    store = make_store(tmp_path / "store", specs, seed=3)
    run = store.values[store.values.family == "counters"].iloc[0]
    MlflowClient(store.uri).set_tag(run.run_id, tg.MISSING_METRICS, "nmn: undefined (NaN) on the 4 units that succeeded")
    build_index(store.uri, tmp_path / "index.duckdb")
    at = open_page(monkeypatch, tmp_path / "index.duckdb", "views/counters.py", section="counters")
    assert not at.exception, [e.value for e in at.exception]
    notes = [c.value for c in at.caption if c.value.startswith("Not computed")]
    from countboard.escaping import md

    # the model's name and the reason are store text: shown as typed (markdown-escaped), the name in bold
    assert notes == [f"Not computed (shown as —), with the reason: **{md(run.model)}**: "
                     f"{md('nmn: undefined (NaN) on the 4 units that succeeded')}"]
    runs = open_page(monkeypatch, tmp_path / "index.duckdb", "views/runs.py")
    table = runs.dataframe[0].value
    assert set(table["missing_metrics"]) == {"", "nmn: undefined (NaN) on the 4 units that succeeded"}


def test_the_runs_page_sends_one_page_of_runs_and_pages_through_all(monkeypatch, filled_index):
    """Issue 33: at 30,000 runs the page sent 2,000 rows at once. A page of ``widgets.PAGE_ROWS`` runs (LIMIT /
    OFFSET in the index), a page control after the table, every run on exactly one page, in the same order."""
    import widgets

    _, db = filled_index
    everything = open_page(monkeypatch, db, "views/runs.py").dataframe[0].value
    assert len(everything) > 7, "the fixture has too few runs to page"
    monkeypatch.setattr(widgets, "PAGE_ROWS", 3)
    at = open_page(monkeypatch, db, "views/runs.py")
    pages = -(-len(everything) // 3)
    control = at.number_input(key="runs_page")
    assert control.max == pages and control.value == 1
    seen = []
    for page in range(1, pages + 1):
        at.number_input(key="runs_page").set_value(page).run()
        table = at.dataframe[0].value
        assert len(table) == (3 if page < pages else len(everything) - 3 * (pages - 1))
        seen += list(table.run_id)
    assert seen == list(everything.run_id)
    assert f"{len(everything):,} runs" in " ".join(c.value for c in at.caption)
    # a search that leaves one page takes the page control away and shows its runs from the first
    model = everything.model.dropna().iloc[0]
    at.text_input(key="runs_search").set_value(model).run()
    assert not [n for n in at.number_input if n.key == "runs_page"] or at.number_input(key="runs_page").value == 1
    assert set(at.dataframe[0].value.model) == {model}


@pytest.mark.parametrize(("family", "page"), families_with_pages()[:1])
def test_a_ranking_longer_than_a_page_is_paged_with_ranks_over_all_entries(monkeypatch, filled_index, family, page):
    import widgets

    _, db = filled_index
    whole = family_table(open_page(monkeypatch, db, page, section=family), family)
    monkeypatch.setattr(widgets, "PAGE_ROWS", 2)
    at = open_page(monkeypatch, db, page, section=family)
    assert len(whole) > 2
    key = next(n.key for n in at.number_input if n.key.endswith("_ranking_page"))
    parts = []
    for number in range(1, -(-len(whole) // 2) + 1):
        at.number_input(key=key).set_value(number).run()
        parts.append(family_table(at, family))
    joined = pd.concat(parts, ignore_index=True)
    assert list(joined.model) == list(whole.model) and list(joined["rank"]) == list(whole["rank"])


def test_a_page_of_several_families_names_its_sections_shortly(monkeypatch, filled_index):
    """The section control of a page with several families names them by the schema's short ``section`` (the
    numeracy page's four titles wrapped onto two rows; its place is held at one row's height before the first
    table is drawn)."""
    _, db = filled_index
    schema = load_schema()
    fams = schema.page_families("numeracy")
    assert len(fams) > 1 and all(f.section and len(f.section) <= 30 for f in fams)
    at = open_page(monkeypatch, db, "views/numeracy.py")
    assert not at.exception, [e.value for e in at.exception]
    control = at.get("button_group")[0]
    labels = [o.content for o in control.proto.options]
    assert labels == [f.section for f in fams]
