"""Back end of the annotation page: count questions about a run's generated images, answered by people.

A ``geckonum_autoeval`` run logs a random subset of its images (``files/annotation_images.zip``) and their
questions (``tables/annotation_sample.parquet``). ``annotation_items`` turns that table into one item per
(image, question); ``LabelStore`` keeps the answers in a DuckDB file, one row per (run, image, question,
annotator), so a session can stop and resume; ``LabelStore.export`` writes them in GeckoNum's Task 1 CSV layout
(``task_1_<generator>.csv``), which ``import-geckonum`` and ``geckonum_autoeval`` (``task.human_labels``) read;
``log_labels`` puts that CSV into the run's artifacts.

Example:
    >>> store = LabelStore("labels.duckdb")  # doctest: +SKIP
    >>> items = annotation_items(sample_table, n=100, seed=0)  # doctest: +SKIP
    >>> todo = store.remaining(run_id, "ann1", items)  # doctest: +SKIP
    >>> store.add(run_id, "sd15", todo.iloc[0], "ann1", "3")  # doctest: +SKIP
    3.0
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.numeracy.answers import parse_count_answer
from countboard.numeracy.release import TASK_COLUMNS

SAMPLE_TABLE = "tables/annotation_sample.parquet"
IMAGES_ZIP = "files/annotation_images.zip"
ITEM_COLUMNS = ["image_id", "question_id", "question", "prompt", "noun"]

_DDL = """
CREATE TABLE IF NOT EXISTS geckonum_labels (
    run_id VARCHAR, model VARCHAR, image_id VARCHAR, question_id INTEGER, question VARCHAR, prompt VARCHAR,
    annot_id VARCHAR, raw_answer VARCHAR, answer DOUBLE, labelled_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (run_id, image_id, question_id, annot_id)
)
"""


def annotation_items(sample: pd.DataFrame, n: int | None = 100, seed: int = 0) -> pd.DataFrame:
    """One row per (image, question) of a random subset of ``n`` images of an annotation sample table.

    Args:
        sample: ``tables/annotation_sample.parquet`` of a run (``image_id``, ``prompt``, ``nouns`` and
            ``questions`` as JSON lists).
        n: Images to keep (all when ``None`` or more than there are); the subset is fixed by ``seed``.
        seed: Seed of the subset.

    Returns:
        Columns ``image_id``, ``question_id``, ``question``, ``prompt``, ``noun``; images in a seeded random order,
        questions in prompt order.
    """
    if sample.empty:
        return pd.DataFrame(columns=ITEM_COLUMNS)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(sample))
    if n is not None:
        order = order[:n]
    rows = []
    for i in order:
        rec = sample.iloc[int(i)]
        nouns, questions = json.loads(rec["nouns"]), json.loads(rec["questions"])
        for q, (noun, question) in enumerate(zip(nouns, questions, strict=True)):
            rows.append({"image_id": rec["image_id"], "question_id": q, "question": question,
                         "prompt": rec["prompt"], "noun": noun})  # fmt: skip
    return pd.DataFrame(rows, columns=ITEM_COLUMNS)


class LabelStore:
    """Answers to count questions in a DuckDB file (created on first use).

    Each call opens and closes its own connection, so the page and an export can use the file one after the
    other without holding a lock.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute(_DDL)

    def _connect(self):
        import duckdb

        return duckdb.connect(str(self.path))

    def add(self, run_id: str, model: str, item: pd.Series | dict, annot_id: str, raw_answer: str) -> float:
        """Store one answer (replacing this annotator's earlier answer to the same question) and return it parsed.

        Raises:
            ValueError: The answer is not a count ("3", "three", "2-3", "10+", "2, 10+"); nothing is stored.
        """
        value = parse_count_answer(raw_answer)
        row = (run_id, model, str(item["image_id"]), int(item["question_id"]), str(item["question"]),
               str(item["prompt"]), str(annot_id), str(raw_answer).strip(), value)  # fmt: skip
        with self._connect() as con:
            con.execute(
                "INSERT OR REPLACE INTO geckonum_labels (run_id, model, image_id, question_id, question, prompt, "
                "annot_id, raw_answer, answer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        return value

    def labels(self, run_id: str, annot_id: str | None = None) -> pd.DataFrame:
        """Stored answers of a run (of one annotator when given), oldest first."""
        sql = "SELECT * FROM geckonum_labels WHERE run_id = ?"
        params: list = [run_id]
        if annot_id is not None:
            sql += " AND annot_id = ?"
            params.append(str(annot_id))
        with self._connect() as con:
            return con.execute(sql + " ORDER BY labelled_at, image_id, question_id", params).df()

    def remaining(self, run_id: str, annot_id: str, items: pd.DataFrame) -> pd.DataFrame:
        """The items this annotator has not answered yet, in the items' order (resuming a session)."""
        done = self.labels(run_id, annot_id)
        if done.empty:
            return items.reset_index(drop=True)
        key = set(zip(done["image_id"], done["question_id"].astype(int), strict=True))
        mask = [(i, int(q)) not in key for i, q in zip(items["image_id"], items["question_id"], strict=True)]
        return items[mask].reset_index(drop=True)

    def progress(self, run_id: str, annot_id: str, items: pd.DataFrame) -> tuple[int, int]:
        """``(answered, total)`` items of this annotator."""
        return len(items) - len(self.remaining(run_id, annot_id, items)), len(items)

    def export(self, run_id: str, folder: str | Path, model: str | None = None) -> Path:
        """Write the run's answers as ``<folder>/task_1_<model>.csv`` in GeckoNum's Task 1 layout."""
        df = self.labels(run_id)
        if df.empty:
            raise ValueError(f"no answers stored for run {run_id} in {self.path}")
        model = model or str(df["model"].iloc[0])
        out = df.assign(model=model)[list(TASK_COLUMNS[1])].copy()
        out["answer"] = out["answer"].map(lambda v: f"{v:g}")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"task_1_{model}.csv"
        out.to_csv(path, index=False)
        return path


def log_labels(tracker, run_id: str, store: LabelStore, model: str | None = None) -> Path:
    """Export the run's answers and log the CSV under ``annotations/`` in the run (``countboard.tracking.Tracker``).

    Returns the artifact path, e.g. ``annotations/task_1_sd15.csv``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = store.export(run_id, tmp, model)
        tracker.add_to_ended_run(run_id, path, "annotations")
        return Path("annotations") / path.name


def load_run_sample(tracker, run_id: str, dst: str | Path) -> tuple[pd.DataFrame, Path]:
    """Download a run's annotation sample table and image zip into ``dst``; returns the table and the zip path."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    table = pd.read_parquet(tracker.download(run_id, SAMPLE_TABLE, dst))
    return table, tracker.download(run_id, IMAGES_ZIP, dst)


def read_annotation_images(path: str | Path) -> dict[str, np.ndarray]:
    """Images of a run's ``files/annotation_images.zip`` by image id (``(H, W, 3)`` uint8)."""
    from countboard.decode import decode_image

    out = {}
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if name.endswith(".png"):
                with zf.open(name) as fh:
                    out[Path(name).stem] = decode_image(fh, name=name)
    return out
