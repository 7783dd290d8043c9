"""Text-to-image numeracy page: GeckoNum human studies and auto-evaluated success, one section each."""

from __future__ import annotations

import family

PAGE = "numeracy"


def main() -> None:
    family.render_page(PAGE, "Text-to-image numeracy")


if __name__ == "__main__":
    main()
