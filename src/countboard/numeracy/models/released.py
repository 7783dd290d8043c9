"""GeckoNum's released images behind the ``Generator`` interface: a generator of the human study, read from disk.

``model=geckonum_release model.name=<generator> model.image_dir=<unzipped release>`` gives the images the study's
annotators saw (``countboard.numeracy.images``), so ``geckonum_autoeval`` and ``geckonum_autometrics`` judge the
paper's own generations and can be compared with its human labels. Its units are the prompts of the dataset ×
every seed that the generator's folder holds (``available_seeds``); an image the release lacks is a failed unit
(``FileNotFoundError`` naming it), and a missing folder is refused before any run exists (``preflight``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from countboard.errors import ConfigError
from countboard.items import GeneratedImage, ImagePrompt
from countboard.models.base import Generator
from countboard.numeracy.images import ReleaseFolder, generator_folder
from countboard.numeracy.release import GENERATORS, image_id


class ReleasedImages(Generator):
    """The images one generator of the study made, read from the unzipped release.

    Args:
        generator: The generator (its folder; the config sets it to ``model.name``): one of ``dalle_3, imagen_a, imagen_b, imagen_c, imagen_d, muse_a, muse_b``.
        image_dir: The unzipped release (the folder holding the generator folders, directly or one level down).
        device: Unused (nothing is computed); kept for the common model interface.
        batch_size: Images read per call.

    Example:
        >>> gen = ReleasedImages("dalle_3", "/data/geckonum_images")  # doctest: +SKIP
        >>> gen.available_seeds()  # doctest: +SKIP
        [0, 1, 2, 3, 4]
    """

    path_params = ("image_dir",)

    def __init__(self, generator: str, image_dir: str, device: str = "cpu", batch_size: int = 16):
        super().__init__(device=device, batch_size=batch_size)
        self.check_name(generator)
        self.generator = generator
        self.release = ReleaseFolder(generator_folder(image_dir, generator, "model.image_dir"))

    @staticmethod
    def check_name(name: str) -> None:
        if name not in GENERATORS:
            raise ConfigError(f"model.name={name!r} is not a generator of the GeckoNum release; use one of "
                              f"{', '.join(GENERATORS)}")

    @classmethod
    def preflight(cls, node: Mapping[str, Any]) -> None:
        """The generator's folder exists (one line naming it and the release's page otherwise)."""
        name = str(node.get("generator", node.get("name")))
        cls.check_name(name)
        if not node.get("image_dir"):
            raise ConfigError("model.image_dir is not set: point it at the unzipped GeckoNum release")
        generator_folder(Path(str(node["image_dir"])), name, "model.image_dir")

    def available_seeds(self) -> list[int]:
        """Every seed the generator's folder has an image of (0-4; Imagen-C also 5-9 for part of its prompts)."""
        return self.release.seeds

    def generate_batch(self, prompts: Sequence[ImagePrompt], seeds: Sequence[int]) -> list[GeneratedImage]:
        """The released image of each ``(prompt, seed)``; ``FileNotFoundError`` when the release lacks one."""
        return [GeneratedImage(p, int(s), self.release.read(image_id(p.prompt_id, s)))
                for p, s in zip(prompts, seeds, strict=True)]
