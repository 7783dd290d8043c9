"""PrACo results as the authors release and score them (``main_statistics.py``): the file layout (``layout``), the
released scorer's conventions applied to the project's counts (``official``), and both conventions over imported
results (``scoring``). The formulas are in ``countboard.metrics.praco_official``; see docs/praco.md.
"""

#: The two halves of a mosaic per collage orientation, as the release names them (here, without numpy, because
#: ``countboard import-praco --help`` lists the orientations).
HALVES = {"vertical": ("upper", "lower"), "horizontal": ("left", "right")}
