"""Grounding page: Q-GroundCAM scores of activation maps against phrase boxes."""

from __future__ import annotations

import family

PAGE = "grounding"


def main() -> None:
    family.render_page(PAGE)


if __name__ == "__main__":
    main()
