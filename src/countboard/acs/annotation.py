"""Human labels of generated texts: simulated ones, and reading label files.

A label file is a CSV with one row per (text, annotator): ``text_id`` (``text_id(text)``, a hash of the text, so a
label follows the exact text it was given for, whichever run or generator wrote it), ``annotator``, ``label`` and,
for reading convenience, ``text``. The Annotate page keeps the labels (``leaderboard/labels.py``, one label per run,
text and annotator) and exports this file; the ``text_acs`` task reads it with ``read_label_file`` and
``adjudicate``.

Simulated labels (``simulate_annotations``) stand in for people when a generator knows the label each text really
expresses: each annotator gives the true label, or with probability ``error_rate`` another label at random.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.errors import ConfigError

LABEL_COLUMNS = ["text_id", "annotator", "label", "text"]
#: Annotator name whose label, when present, overrides the others (the result of an adjudication round).
FINAL = "final"


def text_id(text: str) -> str:
    """Stable id of a text: the first 16 hex digits of its SHA-256.

    Example:
        >>> text_id("A happy story.")
        '11cc4d1e0a49e7c3'
    """
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:16]


def simulate_annotations(true_labels: Sequence[str], labels: Sequence[str], error_rate: float, n_annotators: int,
                         rng: np.random.Generator) -> np.ndarray:
    """``(n_annotators, n)`` labels: the true label, or with probability ``error_rate`` a different one.

    Example:
        >>> simulate_annotations(["a", "b"], ["a", "b"], 0.0, 2, np.random.default_rng(0)).tolist()
        [['a', 'b'], ['a', 'b']]
    """
    if not 0.0 <= error_rate <= 1.0:
        raise ConfigError(f"task.human.error_rate={error_rate} must be in [0, 1]")
    if n_annotators < 1:
        raise ConfigError(f"task.human.annotators={n_annotators} must be at least 1")
    labels = list(labels)
    out = np.empty((n_annotators, len(true_labels)), dtype=object)
    for a in range(n_annotators):
        for i, t in enumerate(true_labels):
            if rng.random() < error_rate:
                others = [x for x in labels if x != t]
                out[a, i] = others[int(rng.integers(len(others)))]
            else:
                out[a, i] = t
    return out


def adjudicate_simulated(votes: np.ndarray, true_labels: Sequence[str]) -> list[str]:
    """Final label per item: the annotators' label where they agree, the true label where they disagree.

    This mirrors the source study, where disagreements were discussed until the annotators agreed.

    Example:
        >>> adjudicate_simulated(np.array([["a", "b"], ["a", "a"]], dtype=object), ["b", "b"])
        ['a', 'b']
    """
    return [votes[0, i] if len(set(votes[:, i])) == 1 else true_labels[i] for i in range(votes.shape[1])]


def read_label_file(path: str | Path, labels: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """Rows of a label file with a known label, and one note per row left out (unknown label, no text id).

    Labels are compared in lower case. Returns a DataFrame with ``LABEL_COLUMNS``.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"human label file {path} not found (task.human.path); write one from the annotation page "
                          "or give a CSV with text_id, annotator, label")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = {"text_id", "label"} - set(df.columns)
    if missing:
        raise ConfigError(f"human label file {path} lacks column(s) {sorted(missing)}; need text_id, annotator, label")
    if "annotator" not in df:
        df["annotator"] = "annotator"
    if "text" not in df:
        df["text"] = ""
    df["label"] = df["label"].str.strip().str.lower()
    problems = []
    bad = ~df["label"].isin(list(labels)) | (df["text_id"].str.strip() == "")
    for i, row in df[bad].iterrows():
        what = "no text_id" if not row["text_id"].strip() else f"label {row['label']!r} not in {list(labels)}"
        problems.append(f"{path.name} row {i + 2}: {what}; row left out")
    return df.loc[~bad, LABEL_COLUMNS].reset_index(drop=True), problems


def adjudicate(rows: pd.DataFrame) -> pd.DataFrame:
    """One label per text: the ``final`` annotator's if any, else the majority; ties get no label.

    Returns a DataFrame indexed by ``text_id`` with ``label`` (missing for ties) and ``n_annotators``.

    Example:
        >>> rows = pd.DataFrame({"text_id": ["t", "t", "u", "u"], "annotator": ["a", "b", "a", "b"],
        ...                      "label": ["pos", "pos", "pos", "neg"]})
        >>> result = adjudicate(rows)
        >>> result.loc["t", "label"], pd.isna(result.loc["u", "label"])
        ('pos', True)
    """
    out = {}
    for tid, grp in rows.groupby("text_id", sort=True):
        latest = grp.drop_duplicates("annotator", keep="last")
        final = latest[latest["annotator"] == FINAL]
        if len(final):
            label = final["label"].iloc[-1]
        else:
            counts = latest["label"].value_counts()
            label = counts.index[0] if len(counts) == 1 or counts.iloc[0] > counts.iloc[1] else None
        out[tid] = {"label": label, "n_annotators": int(latest["annotator"].nunique())}
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("text_id")


def annotator_pair(rows: pd.DataFrame) -> tuple[str, str, pd.DataFrame] | None:
    """The two annotators (``final`` excluded) who labelled most texts in common, and their labels side by side."""
    rows = rows[rows["annotator"] != FINAL].drop_duplicates(["text_id", "annotator"], keep="last")
    wide = rows.pivot(index="text_id", columns="annotator", values="label")
    names = list(wide.columns)
    best = None
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = wide[[a, b]].dropna()
            if len(both) and (best is None or len(both) > len(best[2])):
                best = (str(a), str(b), both)
    return best
