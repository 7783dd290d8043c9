"""CountGD++ through the authors' wrapper (``models/countgdplusplus_model.py`` of the PrACo checkout), called as
``benchmark/benchmark.py`` calls it.

CountGD++ is prompted with a positive text and, optionally, a negative text (a class it must not count), each
with visual exemplars: ``infer(img, pos_text, neg_text, pos_exemplar_img, neg_exemplar_img, pos_exemplars,
neg_exemplars)``. The exemplars are synthetic (generated from text only): ``generated_exemplars.json`` maps an
image's file name to its exemplar box, and the exemplar image of the same name sits beside it
(``models/CountGDPlusPlus/synthetic_exemplars/``). ``get_text_prompt(text, filename)`` singularises the class and
applies the authors' one hard-coded fix (``legos`` in ``7611.jpg`` is ``yellow lego stud``). ``benchmark.py``:

- negative-label test (Test 1), the image's own class prompted: ``infer(img, P(own, image), None,
  exemplar image of the image, None, [its box], None)``;
- Test 1, another class prompted: ``infer(img, P(class, img2), P(own, image), exemplar image of img2, exemplar image
  of the image, [img2's box], [the image's box])``, where ``img2`` is an image of the prompted class drawn with
  Python's ``random`` seeded with 123 at the start of the test, one ``random.choice`` per (image, class) pair,
  images in the split's order and classes in the split's class order (the own class included), among the images
  of that class in ``ImageClasses_FSC147.txt`` order: **the counter is told the image's own class as the negative**;
- mosaic test: ``infer(collage, P(own, image), P(other class, img2), exemplar image of the image, exemplar image of
  img2, [its box], [img2's box])``, img2 being the other tile: **told the other tile's class**.

``benchmark/multiclass_benchmark.py`` has no CountGD++ convention (it calls ``infer(img, prompt)``), so the
multi-class test is refused. The draw and the classes are read from the checkout's ``data/`` files, as ``main.py``
reads them (``--data_dir ./data``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: ``models/loader.py``'s name of CountGD++.
NAME = "CountGDPlusPlus"
#: Relative to the checkout's ``models/``: the synthetic exemplars ``load_model`` reads.
EXEMPLARS = "CountGDPlusPlus/synthetic_exemplars/generated_exemplars.json"
EXEMPLARS_HELP = ("download the synthetic exemplars for FSC-147 and unzip them inside models/CountGDPlusPlus "
                  "(models/CountGDPlusPlus/README.md of the checkout, 'positive and negative text')")
#: ``benchmark.py``: ``random.seed(123)`` at the start of each test.
TEST1_SEED = 123
#: ``main.py``'s data files, relative to the checkout.
IMAGE_CLASSES, SPLIT_IMAGES, SPLIT_CLASSES = ("data/ImageClasses_FSC147.txt", "data/Train_Test_Val_FSC_147.json",
                                              "data/Split_Classes_FSC147.json")


def read_image_classes(path: Path) -> dict[str, str]:
    """``main.py``'s ``img_classes``: image file -> class, in file order (lines of two tab-separated fields)."""
    out: dict[str, str] = {}
    with open(path) as f:
        for line in f:
            fields = line.strip().split("\t")
            if len(fields) == 2:
                out[fields[0]] = fields[1]
    return out


def replay_test1_draws(split_images: list[str], split_classes: list[str], img_classes: dict[str, str],
                   seed: int = TEST1_SEED) -> dict[tuple[str, str], str]:
    """``{(image, prompted class): img2}``: ``benchmark.py``'s ``extract_random_img`` draws of Test 1, replayed.

    Example:
        >>> classes = {"a.jpg": "x", "b.jpg": "y", "c.jpg": "y"}
        >>> partners = replay_test1_draws(["a.jpg", "b.jpg"], ["x", "y"], classes)
        >>> sorted(partners) == [("a.jpg", "x"), ("a.jpg", "y"), ("b.jpg", "x"), ("b.jpg", "y")]
        True
    """
    rng = random.Random(seed)
    pools = {c: [k for k, v in img_classes.items() if v == c] for c in split_classes}
    out = {}
    for image in split_images:
        for cls in split_classes:
            if not pools[cls]:   # the authors' draw fails here; the pair's unit fails with that reason
                continue
            out[(image, cls)] = rng.choice(pools[cls])
    return out


class CountGDPlusPlusCalls:
    """The three calls of ``benchmark.py`` on a loaded ``CountGDPlusPlusModel`` (``model``), with the checkout's
    data files for the classes and the Test 1 draw."""

    def __init__(self, model: Any, repo: Path, split: str, infer: Callable[..., tuple[Any, Any]]):
        self.model, self.repo, self.split, self._infer = model, Path(repo), split, infer
        self.folder = Path(getattr(model, "synthetic_exemplars_folder", repo / "models" / Path(EXEMPLARS).parent))
        self.boxes: dict[str, Any] = getattr(model, "synthetic_exemplars", None) or {}
        self._images: dict[str, Any] = {}
        self._classes: dict[str, str] | None = None
        self._partners: dict[tuple[str, str], str] | None = None

    def image_classes(self) -> dict[str, str]:
        if self._classes is None:
            self._classes = read_image_classes(self.repo / IMAGE_CLASSES)
        return self._classes

    def class_of(self, image: str) -> str:
        if image not in self.image_classes():
            raise ValueError(f"image {image!r} is not in the checkout's {IMAGE_CLASSES}, from which CountGD++'s "
                             "calls take the classes: run it on the images of that file (FSC-147)")
        return self._classes[image]

    def partner(self, image: str, cls: str) -> str:
        """``img2`` of Test 1 for ``image`` prompted with ``cls``."""
        if self._partners is None:
            split_images = json.loads((self.repo / SPLIT_IMAGES).read_text())[self.split]
            split_classes = json.loads((self.repo / SPLIT_CLASSES).read_text())[self.split]
            self._partners = replay_test1_draws(split_images, split_classes, self.image_classes())
        if (image, cls) not in self._partners:
            raise ValueError(f"benchmark.py's Test 1 draws no image of class {cls!r} for {image!r} (the checkout's "
                             f"{SPLIT_IMAGES} and {SPLIT_CLASSES}, split {self.split!r}): CountGD++ needs one for "
                             "its exemplars")
        return self._partners[(image, cls)]

    def exemplar(self, image: str) -> tuple[Any, list]:
        """The synthetic exemplar image of ``image`` (RGB) and ``[its box]``, as ``benchmark.py`` passes them."""
        from PIL import Image

        from countboard.decode import decode_image

        if image not in self.boxes:
            raise ValueError(f"CountGD++ has no synthetic exemplar for image {image!r} in "
                             f"{self.folder / 'generated_exemplars.json'}: {EXEMPLARS_HELP}")
        if image not in self._images:
            self._images[image] = Image.fromarray(decode_image(self.folder / image))
        return self._images[image], [self.boxes[image]]

    def prompt(self, cls: str, image: str) -> Any:
        return self.model.get_text_prompt(cls, image)

    def test1(self, img: Any, image: str, prompted: str) -> tuple[Any, Any]:
        """Test 1's call for ``image`` prompted with ``prompted`` (also the count of the image's own class alone:
        ``classic`` and the mosaic test's single counts)."""
        own = self.class_of(image)
        pos_img, pos_boxes = self.exemplar(image)
        if prompted == own:
            return self._infer(img, self.prompt(own, image), None, pos_img, None, pos_boxes, None)
        img2 = self.partner(image, prompted)
        neg_img, neg_boxes = self.exemplar(img2)
        # benchmark.py: "Negatives and positives are switched for negative label test"
        return self._infer(img, self.prompt(prompted, img2), self.prompt(own, image), neg_img, pos_img, neg_boxes,
                           pos_boxes)

    def mosaic(self, collage: Any, image: str, img2: str) -> tuple[Any, Any]:
        """The mosaic test's call: ``image`` on top, prompted with its class, told the class of ``img2`` below."""
        pos_img, pos_boxes = self.exemplar(image)
        neg_img, neg_boxes = self.exemplar(img2)
        return self._infer(collage, self.prompt(self.class_of(image), image), self.prompt(self.class_of(img2), img2),
                           pos_img, neg_img, pos_boxes, neg_boxes)
