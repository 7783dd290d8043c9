"""Numeracy of text-to-image generators (GeckoNum): the human-study release, its scoring, prompts, generators, task.

- ``release``: the released prompts and annotations; ``answers``: parsing annotator answers; ``scoring``: Task 1-3
  correctness per image-question; ``summary``: accuracies, standard errors, intervals and the appendix tables;
  ``importer``: the release as one result per generator; ``annotation``: answers collected on the Annotate page.
- ``datasets/``: prompt sets (the release and templates for the 12 prompt types).
- ``models/``: image generators (each a ``countboard.models.base.Generator``): diffusers pipelines, procedural.
- ``tasks/``: ``geckonum_autoeval`` (CC and BCC of an automatic evaluator over a generator's images).

Metric formulas are in ``countboard.metrics.numeracy``.
"""
