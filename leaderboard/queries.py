"""SQL of the leaderboard: ``countboard.index.queries``, which ``countboard publish`` reads too."""

from countboard.index.queries import *  # noqa: F403
