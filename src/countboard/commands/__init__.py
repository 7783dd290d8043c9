"""One module per ``countboard`` subcommand, each with ``register(subparsers)``; list it in ``cli._SUBCOMMANDS``."""
