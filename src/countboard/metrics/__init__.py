"""Metrics: pure numpy functions, one module per area (``counting`` for PrACo and classic counting metrics).

To add a metric: a pure function here taking arrays and returning a dict of floats, with a docstring example and
tests against hand-computed cases and a direct loop implementation; declare each key it returns in
``countboard/schema/<area>.yaml``.
"""
