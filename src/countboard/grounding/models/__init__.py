"""Explainers: one module per backend, each a ``countboard.models.base.GroundingModel`` subclass."""
