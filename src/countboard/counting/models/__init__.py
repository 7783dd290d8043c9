"""Counters: one module per backend, each a ``countboard.models.base.Counter`` subclass (``decode`` over batches)."""
