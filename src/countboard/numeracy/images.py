"""The released GeckoNum images on disk: one folder per generator, files ``geckonum_{prompt_id}_{seed_id}.<ext>``.

The release (``DATASET.md``) publishes the images of the seven generators of the human study in a Google Cloud
bucket with one folder per generator (``dalle_3``, ``imagen_a`` … ``muse_b``), also as one 18.8 GB zip. After
unzipping, ``image_dir`` is the folder that holds the generator folders, directly or one level down (the zip's
own top folder, e.g. ``<image_dir>/geckonum/dalle_3``). A file's extension is whatever the release used (``.png``,
``.jpg``, ``.jpeg`` or ``.webp`` are read); its stem is the image id of the annotations.

Example:
    >>> folder = generator_folder("/data/geckonum_images", "dalle_3")  # doctest: +SKIP
    >>> files = ReleaseFolder(folder).files  # {image id: path}  # doctest: +SKIP
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

import numpy as np

from countboard.decode import decode_image
from countboard.errors import DataNotFoundError
from countboard.numeracy.release import GENERATORS, split_image_id

#: Where the images are published (the release's DATASET.md).
RELEASE_PAGE = "https://storage.googleapis.com/geckonum_t2i_benchmark/index.html"
RELEASE_ZIP = "https://storage.googleapis.com/geckonum_t2i_benchmark/geckonum.zip"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
HOW_TO_GET = (f"The released images are at {RELEASE_PAGE} (one folder per generator: {', '.join(GENERATORS)}), "
              f"all of them in {RELEASE_ZIP} (18.8 GB); unzip it and point `image_dir` at the folder that holds the "
              "generator folders.")


def generator_folder(image_dir: str | Path, generator: str, key: str = "image_dir") -> Path:
    """The folder of ``generator``'s images under ``image_dir`` (``<image_dir>/<generator>`` or one level down).

    Raises:
        DataNotFoundError: No such folder; the message names the folders looked at and the release's page.
    """
    root = Path(image_dir).expanduser()
    candidates = [root / generator]
    if root.is_dir():
        candidates += sorted(p / generator for p in root.iterdir() if p.is_dir() and p.name != generator)
    for c in candidates:
        if c.is_dir():
            return c
    raise DataNotFoundError(root / generator, key, f"No folder `{generator}` in it or one level down. {HOW_TO_GET}")


class ReleaseFolder:
    """The image files of one generator's folder, indexed once by image id."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    @cached_property
    def files(self) -> dict[str, Path]:
        """``{image id: path}`` of every image file ``geckonum_<prompt_id>_<seed>.<ext>`` in the folder."""
        out: dict[str, Path] = {}
        with os.scandir(self.folder) as entries:
            for e in entries:
                stem, suffix = os.path.splitext(e.name)
                if suffix.lower() in IMAGE_SUFFIXES and stem.startswith("geckonum_") and e.is_file():
                    out.setdefault(stem, Path(e.path))
        return dict(sorted(out.items()))

    @cached_property
    def seeds(self) -> list[int]:
        """Every seed that at least one image of the folder has."""
        seeds = set()
        for stem in self.files:
            try:
                seeds.add(split_image_id(stem)[1])
            except ValueError:  # a file of another naming: not an image of the release
                continue
        return sorted(seeds)

    def path(self, image_id: str) -> Path:
        """The file of ``image_id``; ``FileNotFoundError`` naming the folder when the release lacks it."""
        found = self.files.get(image_id)
        if found is None:
            raise FileNotFoundError(2, f"no image {image_id} (any of {', '.join(IMAGE_SUFFIXES)}) in the release "
                                       "folder", str(self.folder / image_id))
        return found

    def read(self, image_id: str) -> np.ndarray:
        """``(H, W, 3)`` uint8 RGB pixels of ``image_id``."""
        return decode_image(self.path(image_id))
