"""Text part of the annotation page: people pick the attribute label of texts a ``text_acs`` run generated.

A ``text_acs`` run's ``samples.parquet`` holds each generated text with its prompt. The page shows the texts one
at a time, blind (neither the prompt nor the requested label is shown: an annotator who sees what was asked for
leans towards it, and the BCC correction would inherit that lean), in an order fixed by the run's texts and a seed
(``labels.queue``). Labels go to a DuckDB label store beside the index (``$COUNTBOARD_TEXT_LABELS_DB`` to move
it) whose primary key allows one label per (run, text, annotator); the "Save" button carries the id of the text
on screen, so a label never lands on another text or run. Each save also rewrites the run's label file (one CSV
per run in ``text_labels/`` beside the index, ``$COUNTBOARD_TEXT_LABELS_DIR``), which
``task.human.source=file task.human.path=<csv>`` reads back; "Log the label file to the run" also stores it in
the run's artifacts as ``annotations/text_labels.csv``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

import data
import labels as label_store
import widgets
from countboard.escaping import md_code
from countboard.tracking.tags import CLASSIFIER

LABELS_DIR_ENV = "COUNTBOARD_TEXT_LABELS_DIR"
LABELS_DB_ENV = "COUNTBOARD_TEXT_LABELS_DB"
SAMPLES = "samples.parquet"
TASK = "text_acs"
DEFAULT_TEXTS = 100
LOGGED_NAME = "text_labels.csv"


def labels_dir() -> Path:
    """Folder of the label files: ``$COUNTBOARD_TEXT_LABELS_DIR``, else ``text_labels/`` beside the index."""
    path = os.environ.get(LABELS_DIR_ENV) or str(data.db_path().with_name("text_labels"))
    return Path(path).expanduser()


def label_file(run_id: str) -> Path:
    return labels_dir() / f"{run_id}.csv"


def store() -> label_store.TextLabelStore:
    path = os.environ.get(LABELS_DB_ENV) or str(data.db_path().with_name("text_labels.duckdb"))
    return label_store.TextLabelStore(Path(path).expanduser())


def save_label(run_id: str, item: dict, annot: str, labels: list[str], choice_key: str) -> None:
    """Form callback: the item is the one rendered with the button, bound when the form was drawn."""
    choice = st.session_state.get(choice_key)
    if choice is None:
        st.session_state["annotate_text_msg"] = "Not saved: pick a label first."
        return
    try:
        store().add(run_id, item, annot, choice, labels)
    except ValueError as exc:
        st.session_state["annotate_text_msg"] = f"Not saved: {exc}"
        return
    store().export_csv(run_id, label_file(run_id))


def text_runs() -> pd.DataFrame:
    """``text_acs`` runs whose ``samples.parquet`` is in the index."""
    runs = data.query("SELECT run_id, run_name, model, dataset, status FROM runs WHERE NOT is_sweep AND task = ?",
                      (TASK,))
    if runs.empty:
        return runs
    have = set(data.artifacts(list(runs.run_id), SAMPLES).query("path == @SAMPLES").run_id)
    return runs[runs.run_id.isin(have)].reset_index(drop=True)


def run_labels(run_id: str, samples: pd.DataFrame) -> list[str]:
    """The attribute's labels: the run's ``dataset.labels`` (else the classifier's), else the requested labels."""
    for key in ("dataset.labels", "task.classifier.labels"):
        raw = data.run_param([run_id], key).get(run_id)
        try:
            labels = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            labels = None
        if isinstance(labels, list) and labels:
            return [str(x).strip().lower() for x in labels]
    if "requested" in samples:
        return sorted({str(x).strip().lower() for x in samples["requested"].dropna() if str(x).strip()})
    return []


def rerun_command(model: str, dataset: str, classifier: str, path: Path) -> str:
    parts = ["countboard-sweep", f"model={model}", f"dataset={dataset}", f"task={TASK}",
             f"task/classifier={classifier}", "task.human.source=file", f"task.human.path={path.resolve()}"]
    return " ".join(shlex.quote(p) for p in parts)


def log_to_run(run_id: str, path: Path) -> None:
    tracker = data.open_indexed_store()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / LOGGED_NAME
        shutil.copyfile(path, copy)
        tracker.add_to_ended_run(run_id, copy, "annotations")
    st.success(f"Logged {md_code(f'annotations/{LOGGED_NAME}')} to run {md_code(run_id)}; run `countboard index --scan` to see it in the "
               "index.")


def text_form(run_id: str, item: pd.Series, labels: list[str], annot: str) -> None:
    """The text on screen and its label buttons; the prompt and the requested label stay hidden."""
    st.container(border=True).text(str(item.text))
    with st.form(key="annotate_text_form", clear_on_submit=True):
        st.radio("Label", labels, index=None, horizontal=True, key="annotate_text_label")
        st.form_submit_button("Save and next", on_click=save_label, shortcut="Ctrl+Enter",
                              help="Ctrl+Enter saves; arrow keys move between labels",
                              args=(run_id, {"text_id": item.text_id, "unit_id": item.unit_id, "text": item.text},
                                    annot, labels, "annotate_text_label"))
    msg = st.session_state.pop("annotate_text_msg", None)
    if msg:
        st.warning(msg)


def main() -> None:
    runs = text_runs()
    if runs.empty:
        widgets.launch_hint("No text generator run to label yet: it comes from an attribute control sweep.",
                            "-m model=<text generator> task=text_acs task/classifier=vader")
        return
    run_id, annot, n = widgets.run_picker(runs, "Texts", DEFAULT_TEXTS, "annotate_text")
    samples = data.read_table(run_id, SAMPLES)
    if samples is None:
        st.error(f"`{SAMPLES}` of run {md_code(run_id)} is not readable here; rebuild the index with `countboard index`.")
        return
    labels = run_labels(run_id, samples)
    if not labels:
        st.error(f"Run {md_code(run_id)} logs no labels (`dataset.labels`) and its samples no requested labels.")
        return
    path = label_file(run_id)
    if not annot:
        st.info("Enter an annotator id to start (labels are kept per annotator; a session resumes where it stopped). "
                f"Labels of this run are exported to `{path}`.")
        return
    subset = label_store.queue(samples, run_id).head(n)
    todo = store().remaining(run_id, annot, subset)
    done, total = len(subset) - len(todo), len(subset)
    st.progress(done / total if total else 1.0, text=f"{done} of {total} texts labelled")
    if not todo.empty:
        text_form(run_id, todo.iloc[0], labels, annot)
    else:
        st.success("Every text of this subset is labelled.")
    if st.button("Log the label file to the run", key="annotate_text_log", disabled=not path.is_file()):
        log_to_run(run_id, path)
    if path.is_file():
        row = runs.set_index("run_id").loc[run_id]
        classifier = data.run_tag([run_id], CLASSIFIER).get(run_id, "<classifier>")
        st.markdown("Rerun this cell with these labels (same seed and prompt settings, so the texts match):")
        st.code(rerun_command(str(row.model), str(row.dataset), classifier, path), language="bash")
