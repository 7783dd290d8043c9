"""GeckoNum's VQA benchmark (appendix D): the Task 1 image-question pairs of the released images as counting items.

Each item is one released image (``countboard.numeracy.images``) with one Task 1 question "How many <noun> are in
the image?": its class is the question's noun phrase ("black apples", "dogs" for "How many dogs are to the left of
coconuts?") and its ground-truth count is the mode of the human answers, as in the paper ("the mode of the answers
provided by the annotators, as we did in the rest of the work", D.1). Answers are read as in the import
(``countboard.numeracy.scoring``): a range is its midpoint rounded up, "10+" (and any count above ten) is the bin
11, two comma-separated counts are the first. Which units are kept (``agreement``):

* ``0.8`` (default): the paper's high-agreement benchmark, "only … images on which at least four out of the five
  annotators gave the same response; in this case, the mode corresponds to the majority vote" — the share of the
  unit's answers equal to the mode is at least 0.8 (a unit of 10 answers needs 8), so the mode is unique;
* a lower share, or ``0``: more units; a tie among modes is then resolved by ``ties`` (default ``first``: the tied
  answer given first, the import's rule).

Any counter runs on them under ``task=classic``; ``count_cap`` (11) tells the task that counts above ten are the
"10+" bin. Unit ids are ``<generator>:<image id>:<question id>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.errors import ConfigError
from countboard.fingerprint import path_fingerprint
from countboard.items import ImageDataset, ImageItem
from countboard.metrics.numeracy import round_answers
from countboard.numeracy.answers import TEN_PLUS, parse_count_answers
from countboard.numeracy.images import ReleaseFolder, generator_folder
from countboard.numeracy.release import GENERATORS, read_annotations, read_prompts
from countboard.numeracy.scoring import _QUESTION, score_annotations

_KEYS = ["model", "image_id", "question"]


def question_phrase(question: str) -> str:
    """The noun phrase a Task 1 question asks to count.

    Example:
        >>> question_phrase("How many dogs are to the left of coconuts?")
        'dogs'
        >>> question_phrase("How many black apples are in the image?")
        'black apples'
    """
    m = _QUESTION.match(str(question).strip())
    if m is None:
        raise ValueError(f"{question!r} is not a question 'How many <noun> are …?'")
    return m.group(1).strip()


def agreement_shares(ann: pd.DataFrame, units: pd.DataFrame, ranges: str) -> np.ndarray:
    """Per row of ``units`` (mode labels of ``score_annotations``): the share of its answers equal to its label."""
    values, ok = parse_count_answers(ann["answer"])
    raw_values, raw_ok = parse_count_answers(ann["raw_answer"])
    values = round_answers(np.where(ok, values, raw_values), ranges)
    df = pd.DataFrame({k: ann[k].astype(str).to_numpy() for k in _KEYS}).assign(value=values)[ok | raw_ok]
    agree = df.groupby(_KEYS + ["value"], sort=False).size().rename("n_agree").reset_index()
    keyed = units[_KEYS].astype(str).assign(value=units["label"].to_numpy(float))
    merged = keyed.merge(agree, on=_KEYS + ["value"], how="left")
    return merged["n_agree"].fillna(0).to_numpy(float) / units["n_answers"].to_numpy(float)


class GeckoNumReleaseDataset(ImageDataset):
    """Task 1 image-question pairs of released images, ground truth the mode of the human answers (see above).

    Args:
        root: Folder with ``prompts.csv`` and ``geckonum_annotations.zip`` (``${data_dir}/geckonum``).
        image_dir: The unzipped release (the folder holding the generator folders).
        generators: Generators whose images to use (default all seven).
        agreement: Least share of a unit's answers equal to its mode (0.8: four of five, the paper's benchmark).
        ties: Tie rule of the mode (``countboard.metrics.numeracy.mode_labels``) when ``agreement`` lets ties in.
        ranges: ``up`` (the paper: a range's midpoint rounded up) or ``midpoint``.
        max_images: Keep the first N units (a smoke run; the run is tagged partial).
    """

    name = "geckonum_release"
    #: Counts above ten are one bin, "10+", coded 11 (as the answers are).
    count_cap = TEN_PLUS

    def __init__(self, root: str, image_dir: str, generators: Sequence[str] | None = None,
                 agreement: float = 0.8, ties: str = "first", ranges: str = "up", max_images: int | None = None):
        self.root = Path(root)
        self.generators = list(generators) if generators else list(GENERATORS)
        unknown = [g for g in self.generators if g not in GENERATORS]
        if unknown:
            raise ConfigError(f"dataset.generators: {unknown} are not generators of the GeckoNum release; use "
                              f"{', '.join(GENERATORS)}")
        if not 0 <= float(agreement) <= 1:
            raise ConfigError(f"dataset.agreement={agreement} must be a share of the answers, in [0, 1]")
        self.agreement, self.ties, self.ranges = float(agreement), ties, ranges
        self.folders = {g: ReleaseFolder(generator_folder(image_dir, g, "dataset.image_dir")) for g in self.generators}
        self.table = self._units(max_images)
        self._rows = self.table[["generator", "image_id", "phrase", "gt", "question", "prompt_type", "target",
                                 "agreement"]].to_dict("index")

    def _units(self, max_images: int | None) -> pd.DataFrame:
        prompts = read_prompts(self.root)
        ann = read_annotations(self.root, 1)
        ann = ann[ann["model"].astype(str).isin(self.generators)].reset_index(drop=True)
        units = score_annotations(ann, prompts, 1, generators=self.generators, ties=self.ties,
                                  ranges=self.ranges).units
        if units.empty:
            raise ConfigError(f"no Task 1 annotations of {', '.join(self.generators)} in {self.root}")
        units = units.assign(agreement=agreement_shares(ann, units, self.ranges))
        units = units[units["agreement"] >= self.agreement - 1e-9]
        units = units.assign(generator=units["model"].astype(str), image_id=units["image_id"].astype(str),
                             question=units["question"].astype(str), gt=units["label"].astype(float))
        units["unit_id"] = (units["generator"] + ":" + units["image_id"] + ":"
                            + units["question_id"].astype(str))
        units["phrase"] = units["question"].map(question_phrase)
        units = units.sort_values(["generator", "prompt_id", "seed", "question_id"]).set_index("unit_id")
        return units.iloc[:max_images] if max_images is not None else units

    def fingerprint(self) -> str:
        """The annotations and prompts (content) and, per generator, its folder's files (names and sizes)."""
        parts = [path_fingerprint(self.root / "prompts.csv")]
        for g, folder in self.folders.items():
            listing = "\n".join(f"{k}:{p.stat().st_size}" for k, p in folder.files.items())
            parts.append(f"{g}={hash_text(listing)}")
        parts.append(path_fingerprint(self._annotation_source()))
        return hash_text("|".join(parts))

    def _annotation_source(self) -> Path:
        zips = sorted(self.root.glob("*annotations*.zip"))
        return zips[0] if zips else self.root

    @cached_property
    def image_ids(self) -> list[str]:
        return list(self.table.index)

    @cached_property
    def classes(self) -> list[str]:
        return sorted(self.table["phrase"].unique())

    def class_of(self, image_id: str) -> str:
        return str(self._rows[image_id]["phrase"])

    def count_of(self, image_id: str) -> int:
        return int(self._rows[image_id]["gt"])

    def unit_fields(self, image_id: str) -> dict[str, object]:
        """What a task records of a unit beside its count: generator, image, question, prompt type and number."""
        row = self._rows[image_id]
        return {"generator": row["generator"], "release_image": row["image_id"], "question": row["question"],
                "prompt_type": row["prompt_type"], "prompt_number": float(row["target"]),
                "agreement": float(row["agreement"])}

    def load(self, image_id: str) -> ImageItem:
        row = self._rows[image_id]
        pixels = self.folders[row["generator"]].read(row["image_id"])
        return ImageItem(image_id, pixels, class_name=row["phrase"], counts={row["phrase"]: float(row["gt"])})


def hash_text(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]
