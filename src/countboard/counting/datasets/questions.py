"""What the counting sets asked in words share: their images as bytes or base64, the noun a "How many ...?"
question counts, and the parquet files of a hub download.

A question set (PixMo-Count, TallyQA, CountQA, CAPTURe) is an ``ImageDataset`` whose units are questions: each has
an image, a question (``question_of``), the published answer (``answer_of``) and the counted noun as its class, which
is what a counter is prompted with.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from countboard.errors import ConfigError, DataNotFoundError
from countboard.items import ImageItem

#: Words that end the counted noun phrase of a "How many <noun> <verb> ...?" question.
_VERBS = ("are", "is", "were", "was", "does", "do", "did", "can", "could", "will", "would", "have", "has", "had",
          "appear", "appears", "there", "in", "on", "at", "of", "visible", "seen", "shown", "pictured", "that",
          "which", "who", "sitting", "standing", "being")
_STOP = "|".join(_VERBS)
_HOW_MANY = re.compile(rf"\bhow\s+many\s+(?!(?:{_STOP})\b)(.+?)(?:\s+(?:{_STOP})\b|[?.,]|$)", re.IGNORECASE)


def counted_noun(question: str) -> str | None:
    """The noun phrase a "How many ...?" question counts, or None when the question has no "how many".

    Example:
        >>> counted_noun("How many headlights does the black bus have?"), counted_noun("How many dogs?")
        ('headlights', 'dogs')
        >>> counted_noun("Count the people.") is None, counted_noun("How many are there?") is None
        (True, True)
    """
    match = _HOW_MANY.search(str(question))
    if not match:
        return None
    noun = match.group(1).strip()
    return noun or None


def decode_image(data: object, where: str) -> np.ndarray:
    """An image stored as bytes, a hub image cell (``{"bytes": ..., "path": ...}``) or base64 text, as ``(H, W, 3)``
    uint8 RGB; ``ValueError`` naming ``where`` when it holds none."""
    from PIL import Image

    if isinstance(data, dict):
        data = data.get("bytes")
    if isinstance(data, str):
        try:
            data = base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"{where}: the image is neither bytes nor base64 ({exc})") from exc
    if not data:
        raise ValueError(f"{where}: no image bytes")
    with Image.open(io.BytesIO(bytes(data))) as img:
        return np.asarray(img.convert("RGB"), dtype=np.uint8)


def read_parquets(root: Path, split: str | None, columns: tuple[str, ...], how_to_get: str, name: str):
    """The rows of a hub download's parquet files, ``root/data/<split>-*.parquet`` (every ``*.parquet`` of
    ``root/data``, else of ``root``, when ``split`` is None), concatenated in file-name order."""
    import pandas as pd

    folder = root / "data" if (root / "data").is_dir() else root
    pattern = f"{split}-*.parquet" if split else "*.parquet"
    files = sorted(folder.glob(pattern)) if folder.is_dir() else []
    if not files:
        raise DataNotFoundError(root, "dataset.root", f"No {name} parquet file ({folder.name}/{pattern}). {how_to_get}")
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(f"{files[0]}: columns {missing} are missing (found {list(frame.columns)}); expected the "
                          f"{name} layout. {how_to_get}")
    return frame


def integer_answer(value: object, where: str) -> int:
    """A published answer as an integer (``3``, ``"3"``, ``"3.0"``); ``ConfigError`` naming ``where`` otherwise."""
    try:
        number = float(str(value).strip())
    except ValueError:
        number = float("nan")
    if not np.isfinite(number) or number != int(number) or number < 0:
        raise ConfigError(f"{where}: the answer {value!r} is not a count (a whole number >= 0)")
    return int(number)


class QuestionSet:
    """Mixed into a ``ListedSplitDataset`` whose units are questions: ``_questions`` maps each unit id to its
    ``Question``; a subclass reads its pixels in ``_pixels``."""

    _questions: dict[str, Question]

    def class_of(self, image_id: str) -> str:
        return self._questions[image_id].noun

    def count_of(self, image_id: str) -> int:
        return self._questions[image_id].count

    def question_of(self, image_id: str) -> str:
        """The unit's question, as the benchmark asks it."""
        return self._questions[image_id].question

    def answer_of(self, image_id: str) -> str:
        """The published answer, as the release writes it (the scoring conventions read it)."""
        return self._questions[image_id].answer

    def unit_fields(self, image_id: str) -> dict[str, object]:
        """What a task records of a unit beside its count: the question and the release's own fields."""
        q = self._questions[image_id]
        return {"question": q.question, **q.fields}

    def _pixels(self, image_id: str) -> np.ndarray:
        raise NotImplementedError

    def load(self, image_id: str) -> ImageItem:
        q = self._questions[image_id]
        points = {} if q.points is None or len(q.points) != q.count else {q.noun: q.points}
        return ImageItem(image_id=image_id, image=self._pixels(image_id), points=points, class_name=q.noun,
                         counts={q.noun: float(q.count)})


@dataclass
class Question:
    """One counting question: its text, published answer, the count it stands for and the counted noun."""

    question: str
    answer: str
    count: int
    noun: str
    points: np.ndarray | None = None
    fields: dict[str, object] = field(default_factory=dict)
