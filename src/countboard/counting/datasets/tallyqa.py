"""TallyQA (Acharya et al., AAAI 2019: simple and complex counting questions on COCO and Visual Genome images) in
the TSV VLMEvalKit evaluates.

Layout under ``root`` (VLMEvalKit's data folder, ``$LMUData``; its ``TallyQA`` dataset downloads
``moondream/TallyQA-VLMEvalKit``'s ``tallyqa_data.tsv`` and keeps it as ``TallyQA.tsv``)::

    TallyQA.tsv (or tallyqa_data.tsv)   index, image (base64), question, answer, and issimple or category

As VLMEvalKit's ``ImageBaseDataset`` reads it: tab-separated, rows without an image dropped, an ``image`` cell of
64 characters or fewer is the ``index`` of the row whose image it shares. A unit is a row (``tallyqa_<index>``); its
answer is the integer ``answer``; its class is the counted noun of its question ("How many <noun> ..."), which a
counter is prompted with. ``subset`` keeps the simple or the complex questions: by ``issimple`` (TallyQA's own flag,
``True`` for simple) or, where the TSV has no such column, by ``category`` (``simple`` / ``complex``); a TSV with
neither refuses a subset other than ``all``.
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
)
from countboard.errors import ConfigError, DataNotFoundError

FILES = ("TallyQA.tsv", "tallyqa_data.tsv")
COLUMNS = ("index", "image", "question", "answer")
SUBSETS = ("all", "simple", "complex")
HOW_TO_GET = ("VLMEvalKit's TallyQA TSV is tallyqa_data.tsv of the Hugging Face dataset moondream/TallyQA-VLMEvalKit "
              "(`huggingface-cli download moondream/TallyQA-VLMEvalKit tallyqa_data.tsv --repo-type dataset "
              "--local-dir <dataset.root>`), or TallyQA.tsv in VLMEvalKit's $LMUData folder.")


def is_simple(row: dict, columns: list[str]) -> bool | None:
    """Whether a row is a simple question (``issimple``, else ``category``); None when the TSV says neither."""
    if "issimple" in columns:
        value = row["issimple"]
        return str(value).strip().lower() in ("true", "1", "1.0", "yes", "simple")
    if "category" in columns:
        value = str(row["category"]).strip().lower()
        return True if value == "simple" else False if value == "complex" else None
    return None


class TallyQADataset(QuestionSet, ListedSplitDataset):
    """TallyQA's test questions from VLMEvalKit's TSV.

    Args:
        root: Folder holding ``TallyQA.tsv`` or ``tallyqa_data.tsv``.
        subset: ``all``, ``simple`` or ``complex``.
        max_images: Keep the first ``n`` questions of the subset.
    """

    name = "tallyqa"

    def __init__(self, root: str | Path, subset: str = "all", max_images: int | None = None):
        import pandas as pd

        if subset not in SUBSETS:
            raise ConfigError(f"dataset.subset={subset!r}: use one of {SUBSETS}")
        self.root, self.split, self.subset = Path(root), "test", subset
        found = [self.root / f for f in FILES if (self.root / f).is_file()]
        if not found:
            raise DataNotFoundError(self.root, "dataset.root", f"No {' or '.join(FILES)}. {HOW_TO_GET}")
        self.file = found[0]
        frame = pd.read_csv(self.file, sep="\t", dtype={"index": str, "image": str})
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise ConfigError(f"{self.file}: columns {missing} are missing (found {list(frame.columns)}); expected "
                              f"VLMEvalKit's TallyQA TSV. {HOW_TO_GET}")
        frame = frame[frame["image"].notna()].reset_index(drop=True)
        self._images = _resolve_references(dict(zip(frame["index"].astype(str), frame["image"], strict=True)),
                                           self.file)
        columns = list(frame.columns)
        self._questions: dict[str, Question] = {}
        for row in frame.to_dict("records"):
            simple = is_simple(row, columns)
            if subset != "all" and simple is None:
                raise ConfigError(f"{self.file}: dataset.subset={subset} needs an issimple or category column (found "
                                  f"{columns}); use dataset.subset=all")
            if subset != "all" and simple != (subset == "simple"):
                continue
            index, question = str(row["index"]), str(row["question"])
            count = integer_answer(row["answer"], f"{self.file}: row {index}")
            noun = counted_noun(question) or question.strip().rstrip("?")
            fields = {} if simple is None else {"subset": "simple" if simple else "complex"}
            self._questions[f"tallyqa_{index}"] = Question(question=question, answer=str(row["answer"]), count=count,
                                                           noun=noun, fields=fields)
        ids = list(self._questions)
        self._ids = ids[:max_images] if max_images is not None else ids
        self._classes = list(dict.fromkeys(self._questions[i].noun for i in self._ids))

    def _pixels(self, image_id: str) -> np.ndarray:
        return decode_image(self._images[image_id.removeprefix("tallyqa_")], f"{self.file}: row {image_id}")


def _resolve_references(images: dict[str, str], where: Path) -> dict[str, str]:
    """VLMEvalKit's space saving: an image cell of at most 64 characters is the index of the row holding it."""
    out = {}
    for index, cell in images.items():
        if 0 < len(cell) <= 64:
            if cell not in images or len(images[cell]) <= 64:
                raise ConfigError(f"{where}: row {index}'s image refers to row {cell!r}, which holds no image")
            cell = images[cell]
        out[index] = cell
    return out
