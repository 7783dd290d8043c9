"""Ranks, rank ranges, tie groups and P(A > B): ``countboard.quantify.ranks``, shared with ``countboard publish``."""

from countboard.quantify.ranks import (  # noqa: F401
    TIE_RULE,
    arena_ranks,
    competition_ranks,
    prob_greater_draws,
    prob_greater_intervals,
    prob_greater_normal,
    rank_label,
    rank_ranges,
    ranks_within,
    tie_groups,
)
