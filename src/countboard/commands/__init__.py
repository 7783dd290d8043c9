"""CLI subcommands, one module each with ``register(subparsers)``; list a new one in ``countboard.cli._SUBCOMMANDS``."""
