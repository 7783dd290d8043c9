"""PixMo-Count (Ai2's counting set of Molmo: web images, one object label and count each) as the hub ships it.

Layout under ``root`` (``allenai/pixmo-count`` as downloaded, e.g. ``huggingface-cli download allenai/pixmo-count
--repo-type dataset --local-dir <root>``), with the images fetched from their URLs::

    data/{train,validation,test}-00000-of-00001.parquet   image_url, image_sha256, count, points, label
    images/<key>                                          one file per image URL

The images are URLs (the hub holds none): ``image_dir`` is the folder they were downloaded to, each file named as
Molmo's ``download_pixmo_urls`` names its cache, the SHA-256 of the URL, or by the row's ``image_sha256`` (the hash
of the file's bytes); an extension is allowed. ``check_sha`` verifies the bytes' hash against ``image_sha256``, as
Molmo's downloader does with ``check_sha``. Rows whose image is absent, or whose file is
the error note Molmo's downloader leaves for a URL it could not fetch, are refused (``missing=refuse``) or, as
Molmo's ``filter_and_group_data`` drops URLs that did not download, left out with a warning (``missing=skip``).

A unit is a row (``pixmo_<split>_<row>``); its class is the label, its count ``count``; ``points`` (train only,
``{"x": [...], "y": [...]}`` in pixels) become the item's points. The question is "How many <label> are in the
image?" (lmms-eval's ``tasks/pixmo_count`` reads a ``question`` column of a re-hosted copy; the Ai2 files have none).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np

from countboard.counting.datasets.fsc147 import ListedSplitDataset
from countboard.counting.datasets.questions import Question, QuestionSet, decode_image, read_parquets
from countboard.errors import ConfigError, DataNotFoundError

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
COLUMNS = ("image_url", "image_sha256", "count", "label")
QUESTION = "How many {label} are in the image?"
HOW_TO_GET = ("PixMo-Count is on the Hugging Face hub as allenai/pixmo-count: `huggingface-cli download "
              "allenai/pixmo-count --repo-type dataset --local-dir <dataset.root>` puts data/<split>-*.parquet there; "
              "download each row's image_url into <dataset.root>/images/ named by the SHA-256 of the URL (Molmo's "
              "download_pixmo_urls) or by image_sha256.")


def url_key(url: str) -> str:
    """The file name Molmo's downloader gives an image URL: its SHA-256 in hex.

    Example:
        >>> url_key("https://example.com/a.jpg")[:12]
        '276a1ac00ba4'
    """
    return hashlib.sha256(str(url).encode("utf-8")).hexdigest()


def row_points(cell: object) -> np.ndarray | None:
    """A ``points`` cell (``{"x": [...], "y": [...]}`` or ``[{"x", "y"}, ...]``) as ``(K, 2)`` ``(x, y)``; None when
    the row has none (the eval splits)."""
    if cell is None:
        return None
    if isinstance(cell, dict):
        xs, ys = cell.get("x"), cell.get("y")
        if xs is None or ys is None:
            return None
        return np.stack([np.asarray(xs, np.float64), np.asarray(ys, np.float64)], axis=1).reshape(-1, 2)
    pts = [(float(p["x"]), float(p["y"])) for p in cell]
    return np.asarray(pts, np.float64).reshape(-1, 2)


class PixmoCountDataset(QuestionSet, ListedSplitDataset):
    """One split of PixMo-Count with its downloaded images.

    Args:
        root: Folder holding ``data/*.parquet``.
        split: ``train``, ``validation`` or ``test``.
        image_dir: Folder of the downloaded images (relative to ``root`` unless absolute).
        missing: ``refuse`` (a row without its image is an error) or ``skip`` (left out, counted in ``left_out``).
        check_sha: Check each image's bytes against ``image_sha256`` when it is read.
        max_images: Keep the first ``n`` rows (after ``missing``).
    """

    name = "pixmo_count"

    def __init__(self, root: str | Path, split: str = "test", image_dir: str = "images", missing: str = "refuse",
                 check_sha: bool = False, max_images: int | None = None):
        if split not in SPLITS or missing not in ("refuse", "skip"):
            raise ConfigError(f"dataset.split={split!r}, dataset.missing={missing!r}: use split in {SPLITS} and "
                              f"missing in ('refuse', 'skip')")
        self.root, self.split, self.check_sha = Path(root), split, check_sha
        self.image_dir = Path(image_dir) if Path(image_dir).is_absolute() else self.root / image_dir
        frame = read_parquets(self.root, split, COLUMNS, HOW_TO_GET, "PixMo-Count")
        files = _index(self.image_dir)
        self._files: dict[str, Path] = {}
        self._sha: dict[str, str] = {}
        self._questions: dict[str, Question] = {}
        absent = []
        for k, row in enumerate(frame.itertuples(index=False)):
            unit = f"pixmo_{split}_{k:05d}"
            path = files.get(url_key(row.image_url)) or files.get(str(row.image_sha256))
            if path is None or failed_download(path):
                absent.append(unit)
                continue
            label = str(row.label).strip()
            self._files[unit], self._sha[unit] = path, str(row.image_sha256)
            self._questions[unit] = Question(question=QUESTION.format(label=label), answer=str(int(row.count)),
                                             count=int(row.count), noun=label,
                                             points=row_points(getattr(row, "points", None)),
                                             fields={"image_url": str(row.image_url)})
        self.left_out = len(absent)
        if absent and missing == "refuse":
            raise DataNotFoundError(self.image_dir, "dataset.image_dir",
                                    f"{len(absent)} of the {len(frame)} images of split {split!r} are not downloaded "
                                    f"(e.g. row {absent[0]}); set dataset.missing=skip to leave them out. {HOW_TO_GET}")
        if absent:
            log.warning("pixmo_count: %d of %d images of split %r are not downloaded and are left out",
                        len(absent), len(frame), split)
        ids = list(self._questions)
        self._ids = ids[:max_images] if max_images is not None else ids
        self._classes = list(dict.fromkeys(self._questions[i].noun for i in self._ids))

    def _pixels(self, image_id: str) -> np.ndarray:
        data = self._files[image_id].read_bytes()
        if self.check_sha and hashlib.sha256(data).hexdigest() != self._sha[image_id]:
            raise ValueError(f"{self._files[image_id]}: its SHA-256 is not the row's image_sha256 "
                             f"{self._sha[image_id][:12]}...: the URL now serves another file")
        return decode_image(data, str(self._files[image_id]))


def failed_download(path: Path) -> bool:
    """Whether a cached file is the note Molmo's downloader writes in place of an image it could not fetch (under
    100 bytes, starting with ``<`` or holding ``Error``, the test its ``_download_images`` makes)."""
    if path.stat().st_size >= 100:
        return False
    head = path.read_bytes()[:100]
    return head.startswith(b"<") or b"Error" in head


def _index(folder: Path) -> dict[str, Path]:
    """Files of ``folder`` by name and by name without extension."""
    if not folder.is_dir():
        return {}
    out: dict[str, Path] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file():
                path = Path(entry.path)
                out.setdefault(path.stem, path)
                out[path.name] = path
    return out
