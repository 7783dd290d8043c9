"""Human labels of a ``text_acs`` run's texts, kept in a DuckDB file: one label per (run, text, annotator),
enforced by the table's primary key, and a labelling order that depends only on the run's texts and a seed.

The label file that ``task.human.source=file task.human.path=<csv>`` reads is an export of this store
(``export_csv``: ``run_id``, ``text_id``, ``unit_id``, ``annotator``, ``label``, ``text``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pandas as pd

from countboard.acs.annotation import text_id

DDL = """
CREATE TABLE IF NOT EXISTS text_labels (
    run_id VARCHAR NOT NULL, text_id VARCHAR NOT NULL, annotator VARCHAR NOT NULL, unit_id VARCHAR,
    label VARCHAR NOT NULL, text VARCHAR, labelled_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (run_id, text_id, annotator)
)
"""
EXPORT_COLUMNS = ["run_id", "text_id", "unit_id", "annotator", "label", "text"]


class DuplicateLabel(ValueError):
    """The annotator has already labelled this text of this run."""


def queue(samples: pd.DataFrame, run_id: str, seed: int = 0) -> pd.DataFrame:
    """The run's non-empty texts in labelling order: sorted by a hash of (seed, run, text id), so the order and
    the first ``n`` texts are the same whatever the row order of ``samples`` and whoever labels.

    Returns ``text_id``, ``unit_id``, ``text`` (the requested label and the prompt are left out: annotators label
    blind).
    """
    texts = samples[samples["text"].fillna("").astype(str).str.strip() != ""]
    out = pd.DataFrame({"text_id": texts["text"].map(text_id), "unit_id": texts["unit_id"].astype(str),
                        "text": texts["text"].astype(str)}).drop_duplicates("text_id")
    key = out.text_id.map(lambda t: hashlib.sha256(f"{seed}:{run_id}:{t}".encode()).hexdigest())
    return out.assign(_k=key).sort_values(["_k", "text_id"]).drop(columns="_k").reset_index(drop=True)


class TextLabelStore:
    """Labels in a DuckDB file (created on first use); each call opens and closes its own connection."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with duckdb.connect(str(self.path)) as con:
            con.execute(DDL)

    def add(self, run_id: str, item: dict, annotator: str, label: str, labels: list[str]) -> None:
        """Store one label.

        Raises:
            ValueError: an unknown label or no annotator.
            DuplicateLabel: this annotator already labelled this text of this run (the store refuses it).
        """
        label = str(label).strip().lower()
        if label not in labels:
            raise ValueError(f"label {label!r} is not one of {labels}")
        if not str(annotator).strip():
            raise ValueError("give an annotator id before labelling")
        row = (run_id, str(item["text_id"]), str(annotator).strip(), str(item.get("unit_id", "")), label,
               str(item.get("text", "")))
        try:
            with duckdb.connect(str(self.path)) as con:
                con.execute("INSERT INTO text_labels (run_id, text_id, annotator, unit_id, label, text) "
                            "VALUES (?, ?, ?, ?, ?, ?)", row)
        except duckdb.ConstraintException:
            raise DuplicateLabel(f"{annotator} already labelled text {item['text_id']} of run {run_id}") from None

    def labels(self, run_id: str, annotator: str | None = None) -> pd.DataFrame:
        sql, params = "SELECT * FROM text_labels WHERE run_id = ?", [run_id]
        if annotator is not None:
            sql, params = sql + " AND annotator = ?", [*params, annotator]
        with duckdb.connect(str(self.path)) as con:
            return con.execute(sql + " ORDER BY labelled_at, text_id", params).df()

    def remaining(self, run_id: str, annotator: str, items: pd.DataFrame) -> pd.DataFrame:
        """Items this annotator has not labelled, in queue order."""
        done = set(self.labels(run_id, annotator).text_id)
        return items[~items.text_id.isin(done)].reset_index(drop=True)

    def export_csv(self, run_id: str, path: str | Path) -> Path:
        """Write the run's labels as the label file ``task.human.path`` reads, with run and item ids."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.labels(run_id)[EXPORT_COLUMNS].to_csv(path, index=False)
        return path
