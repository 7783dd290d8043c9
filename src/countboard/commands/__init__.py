"""One module per ``countboard`` subcommand, each with ``register(subparsers)``: parse, call the library, print."""
