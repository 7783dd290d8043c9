"""Annotate page, texts: label a real ``text_acs`` run's texts, resume, log the file, and the empty-store advice."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from tests.conftest import run_sweep
from tests.fixtures.board import app_test

import labels as label_store
from countboard.acs.annotation import read_label_file, text_id
from countboard.index import build_index
from countboard.paths import leaderboard_dir

APP = leaderboard_dir() / "app.py"
N_PROMPTS = 12
SUBMIT = "FormSubmitter:annotate_text_form-Save and next"


@pytest.fixture(scope="module")
def text_index(tmp_path_factory):
    """One small ``text_acs`` cell (procedural generator, VADER, no human labels) swept and indexed."""
    root = tmp_path_factory.mktemp("lb_text")
    run_sweep(["model=story_procedural_good", "dataset=sentiment_stories", "task=text_acs", "task/classifier=vader",
               f"dataset.n_prompts={N_PROMPTS}", "task.human.source=none", "device=cpu", "seed=3"], root)
    store = root / "mlruns"
    db = root / "index.duckdb"
    build_index(f"sqlite:///{store / 'mlflow.db'}", db)
    samples = pd.read_parquet(next(store.glob("artifacts/*/*/artifacts/samples.parquet")))
    return db, samples


def open_texts(monkeypatch, db, labels_dir) -> AppTest:
    monkeypatch.setenv("COUNTBOARD_INDEX_DB", str(db))
    monkeypatch.setenv("COUNTBOARD_TEXT_LABELS_DIR", str(labels_dir))
    monkeypatch.setenv("COUNTBOARD_TEXT_LABELS_DB", str(labels_dir / "text_labels.duckdb"))
    at = app_test("views/annotate.py").run()
    at.radio(key="annotate_kind").set_value("Texts").run()
    return at


def progress(at: AppTest) -> list[str]:
    return [p.proto.text for p in at.get("progress")]


def shown_text(at: AppTest) -> str:
    return at.get("text")[0].value


def test_label_two_texts_then_resume(monkeypatch, text_index, tmp_path):
    db, samples = text_index
    at = open_texts(monkeypatch, db, tmp_path)
    queue = label_store.queue(samples, at.selectbox(key="annotate_text_run").value)
    total = len(queue)
    assert 2 < total <= N_PROMPTS
    assert not at.exception and "annotator id" in " ".join(i.value for i in at.info)
    at.text_input(key="annotate_text_annot").set_value("ann1").run()
    assert progress(at) == [f"0 of {total} texts labelled"]
    assert at.radio(key="annotate_text_label").options == ["positive", "neutral", "negative"]
    assert shown_text(at) == queue.text.iloc[0]
    at.button(key=SUBMIT).click().run()
    assert "pick a label" in " ".join(w.value for w in at.warning)
    for label in ("negative", "neutral"):
        at.radio(key="annotate_text_label").set_value(label)
        at.button(key=SUBMIT).click().run()
        assert not at.exception, [e.value for e in at.exception]
    assert progress(at) == [f"2 of {total} texts labelled"]
    assert shown_text(at) == queue.text.iloc[2]

    csv = tmp_path / f"{at.selectbox(key='annotate_text_run').value}.csv"
    rows = pd.read_csv(csv, dtype=str, keep_default_na=False)
    assert list(rows.columns) == label_store.EXPORT_COLUMNS and set(rows.run_id) == {csv.stem}
    assert read_label_file(csv, ["positive", "neutral", "negative"])[1] == []  # the task reads it back
    assert list(rows.text_id) == [text_id(t) for t in queue.text.iloc[:2]]
    assert list(rows.annotator) == ["ann1", "ann1"] and list(rows.label) == ["negative", "neutral"]
    command = " ".join(c.value for c in at.code)
    assert "task=text_acs" in command and "task/classifier=vader" in command
    assert "model=story_procedural_good" in command and f"task.human.path={csv.resolve()}" in command

    again = open_texts(monkeypatch, db, tmp_path)
    again.text_input(key="annotate_text_annot").set_value("ann1").run()
    assert progress(again) == [f"2 of {total} texts labelled"]
    assert shown_text(again) == queue.text.iloc[2]
    other = open_texts(monkeypatch, db, tmp_path)
    other.text_input(key="annotate_text_annot").set_value("ann2").run()
    assert progress(other) == [f"0 of {total} texts labelled"]


def test_log_the_label_file_to_the_run(monkeypatch, text_index, tmp_path):
    db, samples = text_index
    at = open_texts(monkeypatch, db, tmp_path)
    at.text_input(key="annotate_text_annot").set_value("ann1").run()
    assert at.button(key="annotate_text_log").disabled
    at.radio(key="annotate_text_label").set_value("positive")
    at.button(key=SUBMIT).click().run()
    at.button(key="annotate_text_log").click().run()
    assert not at.exception and "annotations/text_labels.csv" in " ".join(s.value for s in at.success)
    run_id = at.selectbox(key="annotate_text_run").value
    logged = next(db.parent.glob(f"mlruns/artifacts/*/{run_id}/artifacts/annotations/text_labels.csv"))
    assert logged.read_text() == (tmp_path / f"{run_id}.csv").read_text()


def test_empty_store_explains_how_to_get_texts(monkeypatch, empty_index, tmp_path):
    _, db = empty_index
    at = open_texts(monkeypatch, db, tmp_path)
    assert not at.exception and not at.error
    text = " ".join(i.value for i in at.info)
    assert "task=text_acs" in text and "countboard-sweep" in text and "countboard index" in text


def test_prompt_and_requested_label_stay_hidden(monkeypatch, text_index, tmp_path):
    db, samples = text_index
    at = open_texts(monkeypatch, db, tmp_path)
    at.text_input(key="annotate_text_annot").set_value("ann1").run()
    queue = label_store.queue(samples, at.selectbox(key="annotate_text_run").value)
    row = samples[samples.text == queue.text.iloc[0]].iloc[0]
    page = " ".join(str(getattr(e, "value", "")) for e in [*at.caption, *at.markdown, *at.get("text")])
    assert row.text in page
    assert str(row.prompt) not in page and "Prompt" not in page


def test_a_label_lands_on_the_text_shown(monkeypatch, text_index, tmp_path):
    """Another tab labels the text on screen before Save: the store refuses the duplicate and the next text in
    the queue gets no label it was never shown for."""
    db, samples = text_index
    at = open_texts(monkeypatch, db, tmp_path)
    at.text_input(key="annotate_text_annot").set_value("ann1").run()
    run_id = at.selectbox(key="annotate_text_run").value
    queue = label_store.queue(samples, run_id)
    store = label_store.TextLabelStore(tmp_path / "text_labels.duckdb")
    store.add(run_id, queue.iloc[0].to_dict(), "ann1", "positive", ["positive", "neutral", "negative"])
    at.radio(key="annotate_text_label").set_value("negative")
    at.button(key=SUBMIT).click().run()
    assert "already labelled" in " ".join(w.value for w in at.warning)
    got = store.labels(run_id, "ann1")
    assert list(got.text_id) == [queue.text_id.iloc[0]] and list(got.label) == ["positive"]


def test_store_allows_one_label_per_run_text_and_annotator(tmp_path):
    store = label_store.TextLabelStore(tmp_path / "l.duckdb")
    item = {"text_id": "t1", "unit_id": "u1", "text": "x"}
    store.add("r1", item, "ann1", "pos", ["pos", "neg"])
    with pytest.raises(label_store.DuplicateLabel):
        store.add("r1", item, "ann1", "neg", ["pos", "neg"])
    store.add("r1", item, "ann2", "neg", ["pos", "neg"])  # a second annotator: agreement needs it
    store.add("r2", item, "ann1", "neg", ["pos", "neg"])  # the same text in another run
    import duckdb

    with duckdb.connect(str(tmp_path / "l.duckdb")) as con, pytest.raises(duckdb.ConstraintException):
        con.execute("INSERT INTO text_labels (run_id, text_id, annotator, label) VALUES ('r1', 't1', 'ann1', 'x')")
    assert len(store.labels("r1")) == 2


def test_queue_order_does_not_depend_on_row_order():
    samples = pd.DataFrame({"unit_id": [f"u{i}" for i in range(30)], "text": [f"text {i}" for i in range(30)],
                            "requested": ["pos"] * 30, "prompt": ["p"] * 30})
    a = label_store.queue(samples, "run")
    b = label_store.queue(samples.sample(frac=1, random_state=4), "run")
    assert list(a.text_id) == list(b.text_id)
    assert list(a.text_id) != list(label_store.queue(samples, "run", seed=1).text_id)
    assert "requested" not in a and "prompt" not in a


def test_store_refuses_an_unknown_label_or_no_annotator(tmp_path):
    store = label_store.TextLabelStore(tmp_path / "l.duckdb")
    item = {"text_id": "t1", "unit_id": "u1", "text": "x"}
    with pytest.raises(ValueError, match="not one of"):
        store.add("r1", item, "ann1", "happy", ["positive", "negative"])
    with pytest.raises(ValueError, match="annotator"):
        store.add("r1", item, " ", "positive", ["positive", "negative"])
    store.add("r1", item, "ann1", " Positive ", ["positive", "negative"])  # case and spaces do not matter
    assert store.labels("r1").label.tolist() == ["positive"]


def test_queue_leaves_out_empty_texts_and_remaining_what_an_annotator_labelled(tmp_path):
    samples = pd.DataFrame({"unit_id": [f"s{i}" for i in range(10)], "text": [f"Story {i}." for i in range(9)] + [""]})
    queue = label_store.queue(samples, "run", seed=3)
    assert len(queue) == 9 and list(queue.columns) == ["text_id", "unit_id", "text"]
    store = label_store.TextLabelStore(tmp_path / "l.duckdb")
    store.add("run", queue.iloc[0].to_dict(), "ann1", "positive", ["positive"])
    assert list(store.remaining("run", "ann1", queue).text_id) == list(queue.text_id[1:])
    assert len(store.remaining("run", "ann2", queue)) == 9
    path = store.export_csv("run", tmp_path / "labels.csv")
    rows, problems = read_label_file(path, ["positive"])
    assert problems == [] and rows["text_id"].tolist() == [queue.text_id[0]]
