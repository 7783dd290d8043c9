"""Attribute control page: text and image generators judged by a classifier with BCC correction."""

from __future__ import annotations

import family

PAGE = "acs"


def main() -> None:
    family.render_page(PAGE)


if __name__ == "__main__":
    main()
