"""Annotation page: people answer the count questions about a run's generated images (GeckoNum Task 1 layout).

Texts of ``text_acs`` runs are labelled on the same page ("Texts"); see ``annotate_text``.

Runs that saved an annotation sample (``geckonum_autoeval``: ``tables/annotation_sample.parquet`` and
``files/annotation_images.zip``) can be labelled here. Answers go to a label store (a DuckDB file beside the
index, ``$COUNTBOARD_LABELS_DB`` to move it), never to the index; "Log the answers to the run" writes them into
the run's artifacts as ``annotations/task_1_<generator>.csv``, which ``geckonum_autoeval`` reads back
(``task.human_labels``) to correct its success rate.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

import annotate_text
import data
import widgets
from countboard.escaping import md, md_code
from countboard.numeracy.annotation import (
    IMAGES_ZIP,
    SAMPLE_TABLE,
    LabelStore,
    annotation_items,
    read_annotation_images,
)

LABELS_ENV = "COUNTBOARD_LABELS_DB"
DEFAULT_IMAGES = 100


def label_store() -> LabelStore:
    path = os.environ.get(LABELS_ENV) or str(data.db_path().with_name("labels.duckdb"))
    return LabelStore(Path(path).expanduser())


@st.cache_data(max_entries=8, show_spinner=False)
def _images(zip_path: str, mtime_ns: int) -> dict[str, np.ndarray]:
    return read_annotation_images(zip_path)


def candidate_runs() -> pd.DataFrame:
    """Runs holding both the annotation sample and its images."""
    runs = data.query("SELECT run_id, run_name, model, dataset, status FROM runs WHERE NOT is_sweep")
    if runs.empty:
        return runs
    have = data.artifacts(list(runs.run_id), "")
    ok = set(have[have.path == SAMPLE_TABLE].run_id) & set(have[have.path == IMAGES_ZIP].run_id)
    return runs[runs.run_id.isin(ok)].reset_index(drop=True)


def log_to_run(run_id: str, model: str, store: LabelStore) -> None:
    from countboard.numeracy.annotation import log_labels

    path = log_labels(data.open_indexed_store(), run_id, store, model)
    st.success(f"Logged {md_code(path)} to run {md_code(run_id)}; run `countboard index --scan` to see it in the index.")


def save_answer(run_id: str, model: str, item: dict, annot: str, store: LabelStore) -> None:
    """Form callback: the item is the one drawn with the button (bound then), never the next one in the queue."""
    try:
        store.add(run_id, model, item, annot, st.session_state.get("annotate_answer", ""))
    except ValueError as exc:
        st.session_state["annotate_msg"] = f"Not saved: {exc}"


def question_form(run_id: str, model: str, item: pd.Series, annot: str, store: LabelStore, image) -> None:
    """The image and one count question. The prompt (which states the requested number) stays hidden: the
    annotator counts blind."""
    cols = st.columns([3, 2])
    if image is not None:
        cols[0].image(image, caption=f"Image {item.image_id}")
    else:
        cols[0].info(f"Image {md(item.image_id)} is not in {md_code(IMAGES_ZIP)}.")
    with cols[1].form(key="annotate_form", clear_on_submit=True):
        st.markdown(f"**{md(item.question)}**")
        st.text_input("Answer (a number, a word, a range such as 2-3, or 10+)", key="annotate_answer")
        st.form_submit_button("Save and next", on_click=save_answer, shortcut="Ctrl+Enter",
                              help="Enter in the answer box or Ctrl+Enter saves",
                              args=(run_id, model, item.to_dict(), annot, store))
    msg = st.session_state.pop("annotate_msg", None)
    if msg:
        cols[1].warning(msg)


def main() -> None:
    st.title("Annotate")
    kind = st.radio("What to label", ["Images", "Texts"], horizontal=True, key="annotate_kind",
                    help="Images: count questions of geckonum_autoeval runs. Texts: attribute labels of text_acs runs.")
    if kind == "Texts":
        st.caption("The attribute label of a run's generated texts, picked by people: the human labels that "
                   "Bayesian classify & count uses to correct the text classifier.")
        annotate_text.main()
        return
    st.caption("Count questions about a run's generated images, answered by people: the human labels that "
               "Bayesian classify & count uses to correct an automatic evaluator.")
    images_page()


def images_page() -> None:
    runs = candidate_runs()
    if runs.empty:
        widgets.launch_hint("No run has an annotation sample yet: it comes from an auto-evaluated GeckoNum sweep.",
                            "-m model=<generator> dataset=geckonum_prompts task=geckonum_autoeval")
        return
    run_id, annot, n = widgets.run_picker(runs, "Images", DEFAULT_IMAGES, "annotate")
    sample = data.read_table(run_id, SAMPLE_TABLE)
    items = annotation_items(sample, n=n, seed=0)
    model = str(runs.set_index("run_id").loc[run_id, "model"])
    store = label_store()
    if not annot:
        st.info("Enter an annotator id to start (answers are kept per annotator; a session resumes where it stopped).")
        return
    done, total = store.progress(run_id, annot, items)
    st.progress(done / total if total else 1.0, text=f"{done} of {total} questions answered")
    todo = store.remaining(run_id, annot, items)
    if not todo.empty:
        zip_path = data.artifact_file(run_id, IMAGES_ZIP)
        images = _images(str(zip_path), zip_path.stat().st_mtime_ns) if zip_path else {}
        item = todo.iloc[0]
        question_form(run_id, model, item, annot, store, images.get(str(item.image_id)))
    else:
        st.success("Every question of this sample is answered.")
    if st.button("Log the answers to the run", key="annotate_log", disabled=done == 0):
        log_to_run(run_id, model, store)


if __name__ == "__main__":
    main()
