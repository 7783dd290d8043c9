"""CountBench (491 web images, each with a number 2-10 of one noun) in the CountBenchQA layout of the hub.

Layout under ``root`` (``vikhyatk/CountBenchQA`` as downloaded, e.g. ``huggingface-cli download vikhyatk/CountBenchQA
--repo-type dataset --local-dir <root>``)::

    data/test-00000-of-00001.parquet    columns image ({"bytes", "path"}), text (the caption), question, number

Every ``*.parquet`` under ``root/data`` (else under ``root``) is read, in name order; an image's id is its row
(``countbench_000`` ...). Its class is the noun of its question ("How many <noun> are there in the image?"),
which is what a counter is prompted with; the question itself stays on the item for models asked in words.
"""

from __future__ import annotations

import re
from pathlib import Path

from countboard.counting.datasets.fsc147 import ListedSplitDataset
from countboard.decode import decode_image
from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageItem

COLUMNS = ("image", "question", "number")
HOW_TO_GET = ("CountBench is on the Hugging Face hub as vikhyatk/CountBenchQA: `huggingface-cli download "
              "vikhyatk/CountBenchQA --repo-type dataset --local-dir <dataset.root>` puts data/test-*.parquet there.")
_NOUN = re.compile(r"^\s*how many\s+(.+?)\s+(?:are|is)\b", re.IGNORECASE)


def question_noun(question: str) -> str | None:
    """The counted noun of a CountBenchQA question, or None when it is not a "How many ... are/is" question.

    Example:
        >>> question_noun("How many sheep are there in the image?"), question_noun("Count them.")
        ('sheep', None)
    """
    match = _NOUN.match(str(question))
    return match.group(1).strip() if match else None


class CountBenchDataset(ListedSplitDataset):
    """CountBench read from its parquet file(s).

    Args:
        root: Folder holding the layout above.
        max_images: Keep the first ``n`` rows.
    """

    name = "countbench"

    def __init__(self, root: str | Path, max_images: int | None = None):
        import pandas as pd

        self.root = Path(root)
        self.split = "test"
        folder = self.root / "data" if (self.root / "data").is_dir() else self.root
        files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
        if not files:
            raise DataNotFoundError(self.root, "dataset.root", f"No CountBenchQA parquet file (data/*.parquet). "
                                                               f"{HOW_TO_GET}")
        frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise ConfigError(f"{files[0]}: columns {missing} are missing (found {list(frame.columns)}); "
                              f"expected the CountBenchQA layout. {HOW_TO_GET}")
        if max_images is not None:
            frame = frame.iloc[:max_images]
        nouns = [question_noun(q) for q in frame["question"]]
        bad = [k for k, n in enumerate(nouns) if n is None]
        if bad:
            raise ConfigError(f"{folder}: row {bad[0]} asks {frame['question'].iloc[bad[0]]!r}, not 'How many <noun> "
                              f"are ...?' ({len(bad)} such rows); the counted noun cannot be read from it")
        self._frame = frame.reset_index(drop=True)
        self._ids = [f"countbench_{k:03d}" for k in range(len(frame))]
        self._row = {i: k for k, i in enumerate(self._ids)}
        self._nouns = dict(zip(self._ids, nouns, strict=True))
        self._classes = list(dict.fromkeys(nouns))

    def class_of(self, image_id: str) -> str:
        return self._nouns[image_id]

    def count_of(self, image_id: str) -> int:
        return int(self._frame["number"].iloc[self._row[image_id]])

    def question_of(self, image_id: str) -> str:
        """The row's question, as a model asked in words receives it."""
        return str(self._frame["question"].iloc[self._row[image_id]])

    def load(self, image_id: str) -> ImageItem:
        cell = self._frame["image"].iloc[self._row[image_id]]
        data = cell.get("bytes") if isinstance(cell, dict) else cell
        if not data:
            raise ValueError(f"{image_id}: the parquet row holds no image bytes")
        image = decode_image(data, name=image_id)
        return ImageItem(image_id=image_id, image=image, class_name=self.class_of(image_id))
