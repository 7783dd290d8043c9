"""CountQA (2025: over 1,500 counting questions on real photographs of dense, cluttered and
occluded objects) as a Hugging Face parquet download.

Layout under ``root`` (assumed: the release's card was not reachable when this loader was written, so it reads the
hub's usual image-question-answer parquet and names what it misses; docs/counters.md says so)::

    data/*.parquet   image ({"bytes", "path"} or bytes), question, answer; optionally object (the counted noun)

Every ``*.parquet`` under ``root/data`` (else under ``root``) is read, in name order; a unit is a row
(``countqa_<row>``). Its count is the integer ``answer`` (exact match and relaxed accuracy within 5 % and 10 % are
scored against it); its class is ``object`` where the files have it, else the counted noun of its question.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from countboard.counting.datasets.fsc147 import ListedSplitDataset
from countboard.counting.datasets.questions import (
    Question,
    QuestionSet,
    counted_noun,
    decode_image,
    integer_answer,
    read_parquets,
)

COLUMNS = ("image", "question", "answer")
HOW_TO_GET = ("CountQA is released as parquet files with image, question and answer columns (its authors' Hugging "
              "Face dataset); download it with `huggingface-cli download <repo> --repo-type dataset --local-dir "
              "<dataset.root>` so that data/*.parquet are there.")


class CountQADataset(QuestionSet, ListedSplitDataset):
    """CountQA's questions.

    Args:
        root: Folder holding ``data/*.parquet``.
        max_images: Keep the first ``n`` rows.
    """

    name = "countqa"

    def __init__(self, root: str | Path, max_images: int | None = None):
        self.root, self.split = Path(root), "test"
        frame = read_parquets(self.root, None, COLUMNS, HOW_TO_GET, "CountQA")
        if max_images is not None:
            frame = frame.iloc[:max_images]
        self._frame = frame.reset_index(drop=True)
        self._questions: dict[str, Question] = {}
        self._row: dict[str, int] = {}
        for k, row in enumerate(self._frame.drop(columns=["image"]).to_dict("records")):
            unit, question = f"countqa_{k:04d}", str(row["question"])
            named = str(row["object"]).strip() if row.get("object") else ""
            noun = named or counted_noun(question) or question.strip().rstrip("?")
            count = integer_answer(row["answer"], f"{self.root}: row {k}")
            self._questions[unit] = Question(question=question, answer=str(row["answer"]), count=count, noun=noun)
            self._row[unit] = k
        self._ids = list(self._questions)
        self._classes = list(dict.fromkeys(q.noun for q in self._questions.values()))

    def _pixels(self, image_id: str) -> np.ndarray:
        return decode_image(self._frame["image"].iloc[self._row[image_id]], f"{self.root}: {image_id}")
