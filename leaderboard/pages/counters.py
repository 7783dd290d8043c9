"""Counters page: the families with ``page: counters`` (PrACo prompt-aware counters)."""

from __future__ import annotations

import family

PAGE = "counters"


def main() -> None:
    family.render_page(PAGE)


if __name__ == "__main__":
    main()
