"""Errors and warnings of the quantification engine."""

from __future__ import annotations

from countboard.errors import CountboardError


class QuantifyInputError(CountboardError, ValueError):
    """Counts or parameters that the quantification model cannot take (the message says which and why)."""


class BCCWarning(UserWarning):
    """A posterior was computed but deserves a look: R-hat above 1.01, or a rate with no calibration data."""
