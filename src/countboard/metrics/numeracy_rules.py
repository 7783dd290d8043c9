"""The answer rules of the numeracy metrics, without numpy: ``countboard import-geckonum`` offers them as choices
and its ``--help`` must stay light. ``countboard.metrics.numeracy`` applies them."""

#: Tie rules of ``mode_labels``; the first is the default.
TIE_RULES = ("first", "lowest", "any", "none")
#: Rules of ``round_answers``; the first is the default.
RANGE_RULES = ("up", "midpoint")
