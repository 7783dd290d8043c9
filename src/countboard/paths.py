"""Where the packaged configuration and the leaderboard app live, in a wheel and in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.is_dir():
            return c
    raise FileNotFoundError(f"none of {', '.join(map(str, candidates))} exists; is countboard installed correctly?")


def conf_dir() -> Path:
    """The Hydra config directory: ``countboard/conf`` in a wheel, ``<repo>/conf`` in a checkout."""
    return _first_existing(_PKG / "conf", _PKG.parents[1] / "conf")


#: The leaderboard's pages: (module under ``views/``, URL path); the Overview is the app's root.
LEADERBOARD_PAGES = (("overview", ""), ("counters", "counters"), ("numeracy", "numeracy"), ("acs", "acs"),
                     ("grounding", "grounding"), ("runs", "runs"), ("annotate", "annotate"))
LEADERBOARD_PAGE_PATHS = tuple(url for _, url in LEADERBOARD_PAGES if url)


def leaderboard_dir() -> Path:
    """The Streamlit app directory: ``countboard/leaderboard_app`` in a wheel, ``<repo>/leaderboard`` in a checkout."""
    return _first_existing(_PKG / "leaderboard_app", _PKG.parents[1] / "leaderboard")
