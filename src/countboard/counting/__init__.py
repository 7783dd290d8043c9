"""Counting (PrACo, "Mind the Prompt"): prompt-based class-agnostic counters and the negative-label and mosaic tests.

- ``datasets/``: FSC-147 (official layout), the generated ``synthetic_shapes`` set, mosaics.
- ``models/``: counters (each implements ``countboard.models.base.Counter``): references, OWLv2, Grounding DINO,
  CLIPSeg, the trainable ``shapecount``.
- ``tasks/``: ``praco_negative``, ``praco_mosaic``, ``classic``. Metric formulas are in ``countboard.metrics.counting``.

To add a counter: a module in ``models/`` with one ``Counter`` subclass, and ``conf/model/<name>.yaml``.
"""
