"""Items that flow from datasets to models and from models to tasks, and the interface of an image dataset.

The model interfaces (``countboard.models.base``) are typed against these, so they need nothing of the domains:
``ImageItem`` (counting), ``ImagePrompt`` / ``GeneratedImage`` (image generators), ``TextPrompt`` /
``GeneratedText`` (text generators), ``GroundingSample`` (grounding). A domain's own richer prompt (GeckoNum's
``PromptSpec``) satisfies ``ImagePrompt``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np


@dataclass
class ImageItem:
    """One image with whatever annotation the dataset has.

    Attributes:
        image_id: Stable id (file name for FSC-147).
        image: ``(H, W, 3)`` uint8 RGB array.
        points: Object centres per class name, each ``(K, 2)`` float array of ``(x, y)`` pixel coordinates.
            Mosaics carry the points of both halves. Empty when the dataset has no point annotations.
        boxes: Exemplar or object boxes per class name, each ``(K, 4)`` array of ``(y0, x0, y1, x1)``.
        class_name: The image's own (positive) class, when it has one.
        counts: Annotated counts per class name where the dataset knows counts but no points (GeckoNum's human
            answers); empty otherwise.
        object_boxes: Ground-truth boxes of every annotated object per class name, each ``(K, 4)`` pixel
            ``(y0, x0, y1, x1)`` in the coordinates of ``image`` (FSCD-147's box annotations; ``boxes`` holds the
            exemplars): what the detection AP of a counter that outputs boxes is scored against. Empty when the
            dataset has none.
    """

    image_id: str
    image: np.ndarray
    points: dict[str, np.ndarray] = field(default_factory=dict)
    boxes: dict[str, np.ndarray] = field(default_factory=dict)
    class_name: str | None = None
    counts: dict[str, float] = field(default_factory=dict)
    object_boxes: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def size(self) -> tuple[int, int]:
        return int(self.image.shape[0]), int(self.image.shape[1])

    def count_of(self, class_name: str | None = None) -> int:
        """Annotated objects of ``class_name`` (default: the image's own class); 0 when the class is absent."""
        name = self.class_name if class_name is None else class_name
        pts = self.points.get(name) if name is not None else None
        if pts is None and name in self.counts:
            return int(self.counts[name])
        return 0 if pts is None else len(pts)

    @property
    def all_points(self) -> np.ndarray:
        """Points of every class stacked into one ``(K, 2)`` array."""
        arrays = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in self.points.values()]
        return np.concatenate(arrays) if arrays else np.zeros((0, 2))


class ImageDataset(ABC):
    """A split of annotated images, each with one positive class (FSC-147 and datasets in its layout).

    Subclasses provide the ordered ``image_ids``, the split's ``classes``, the positive class and ground-truth
    count of each image, and ``load``; indexing and iteration follow from these.
    """

    name: str = ""

    @property
    @abstractmethod
    def image_ids(self) -> list[str]:
        """Image ids of the split, in a fixed order."""

    @property
    @abstractmethod
    def classes(self) -> list[str]:
        """Class names of the split that have at least one image, in a fixed order."""

    @abstractmethod
    def class_of(self, image_id: str) -> str:
        """The positive class of an image."""

    @abstractmethod
    def count_of(self, image_id: str) -> int:
        """Ground-truth count of the image's positive class (known without loading pixels)."""

    @abstractmethod
    def load(self, image_id: str) -> ImageItem:
        """Read one image with its annotation; raises ``OSError`` or ``ValueError`` when the file is unreadable."""

    def images_of(self, class_name: str) -> list[str]:
        """Image ids whose positive class is ``class_name``, in dataset order."""
        return [i for i in self.image_ids if self.class_of(i) == class_name]

    def __len__(self) -> int:
        return len(self.image_ids)

    def __getitem__(self, index: int) -> ImageItem:
        return self.load(self.image_ids[index])

    def __iter__(self) -> Iterator[ImageItem]:
        for image_id in self.image_ids:
            yield self.load(image_id)

    def load_many(self, image_ids: Sequence[str]) -> list[ImageItem]:
        return [self.load(i) for i in image_ids]


class ImagePrompt(Protocol):
    """What an image generator reads of a prompt: its id and its text."""

    @property
    def prompt_id(self) -> int: ...

    @property
    def prompt(self) -> str: ...


@dataclass
class GeneratedImage:
    """One generated image.

    Attributes:
        prompt: The prompt it was generated from.
        seed: The generation seed.
        image: ``(H, W, 3)`` uint8 RGB.
        drawn_counts: Objects actually drawn per noun, when the generator knows them (procedural); else None.
        meta: Anything else the generator knows, e.g. ``points`` (object centres per class name, procedural).
    """

    prompt: ImagePrompt
    seed: int
    image: np.ndarray
    drawn_counts: dict[str, int] | None = None
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class TextPrompt:
    """One prompt of a controlled prompt set.

    Attributes:
        prompt_id: Stable id (the unit id of the ``text_acs`` task).
        prompt: The text given to the generator.
        label: The requested attribute value (e.g. ``"positive"``).
        title: The story title the prompt was built from ("" for free prompts).
    """

    prompt_id: str
    prompt: str
    label: str
    title: str = ""


@dataclass
class GeneratedText:
    """One generated text.

    Attributes:
        prompt: The prompt it answers (with its requested label).
        text: The generated text, prompt and special tokens removed.
        true_label: The label the text actually expresses, when the generator knows it (procedural); else None.
    """

    prompt: TextPrompt
    text: str
    true_label: str | None = None


@dataclass
class GroundingSample:
    """One phrase to ground in one image.

    Attributes:
        sample_id: Stable id within the dataset.
        phrase: Text to ground.
        box: Ground-truth ``(y0, x0, y1, x1)`` in pixels.
        image_path: File to read the image from (``None`` when ``image`` is given).
        image: ``(H, W, 3)`` uint8 RGB array, for generated samples.
        meta: Extra fields (caption, category, setting) kept in the per-sample records.
    """

    sample_id: str
    phrase: str
    box: tuple[float, float, float, float]
    image_path: Path | None = None
    image: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def load_image(self) -> np.ndarray:
        """The image as ``(H, W, 3)`` uint8 RGB."""
        if self.image is not None:
            return self.image
        if self.image_path is None or not Path(self.image_path).is_file():
            raise FileNotFoundError(f"image of sample {self.sample_id} not found at {self.image_path}")
        from countboard.decode import decode_image

        return decode_image(self.image_path)
