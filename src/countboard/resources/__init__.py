"""Data files shipped with the package (the GeckoNum release, CC-BY 4.0; the PrACo exclusion list)."""

from __future__ import annotations

from pathlib import Path

GECKONUM_DIR = Path(__file__).resolve().parent / "geckonum"
#: The 38 FSC-147 test images holding more than one category (ids without ``.jpg``), left out by PrACo's authors.
PRACO_EXCLUSION_FILE = Path(__file__).resolve().parent / "praco" / "images_with_multiple_classes_test.txt"
