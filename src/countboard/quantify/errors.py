"""Errors and warnings of the quantification engine."""

from __future__ import annotations

from countboard.errors import CountboardError


class QuantifyInputError(CountboardError, ValueError):
    """Counts or parameters that the quantification model cannot take (the message says which and why)."""


class NoHumanPositivesError(QuantifyInputError):
    """A BCC cell has no human positive (``tp + fn = 0``) and the caller did not opt in to a prior-only TPR."""


class BCCWarning(UserWarning):
    """A posterior was computed but deserves a look: R-hat above 1.01, or a rate with no calibration data."""
