"""CLI subcommands, one module each with ``register(subparsers)``; list a new one in ``cli._SUBCOMMANDS``."""
