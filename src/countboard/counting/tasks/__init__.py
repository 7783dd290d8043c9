"""Counting protocols: PrACo negative-label and mosaic tests, classic counting error."""
