"""The shapecount recipes and where their checkpoints live: what ``countboard train-counter`` parses, without torch.

``naive`` sees single-class images with their own class only; ``aware`` also multi-class images and prompts of
absent classes (see ``shapecount``).
"""

from __future__ import annotations

from pathlib import Path

RECIPES = ("naive", "aware")
TRAIN_EPOCHS = 12  # the default of ``TrainConfig.epochs`` (train times on 2 CPU cores: docs/benchmarks.md)


def local_checkpoint_path(data_dir: str | Path, recipe: str) -> Path:
    """Where ``countboard train-counter`` writes the checkpoint of ``recipe`` under ``data_dir``."""
    return Path(data_dir) / "checkpoints" / f"shapecount_{recipe}.pt"
