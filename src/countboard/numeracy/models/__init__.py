"""Image generators: one module per backend, each a ``countboard.models.base.Generator`` subclass."""
