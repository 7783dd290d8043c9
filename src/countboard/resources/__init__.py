"""Data files shipped with the package (the GeckoNum release, CC-BY 4.0)."""

from __future__ import annotations

from pathlib import Path

GECKONUM_DIR = Path(__file__).resolve().parent / "geckonum"
