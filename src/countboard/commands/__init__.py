"""CLI subcommands, one module each. To add one: write ``register(subparsers)`` (add a parser, set ``func``) in a
new module here and list it in ``_SUBCOMMANDS`` of ``countboard/cli.py``."""
