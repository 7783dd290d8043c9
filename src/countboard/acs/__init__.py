"""Attribute control success (BCC paper): generators whose outputs are judged by classifiers, corrected by BCC.

- ``datasets/``: text prompt sets (sentiment stories) and simulated classifier data.
- ``models/``: text generators (causal LMs, procedural) and text classifiers (interfaces in ``countboard.models.base``).
- ``tasks/``: ``bcc`` (a classifier over a generator's labelled outputs) and ``text_acs`` (generate, classify, correct).
- ``annotation``: labels collected on the Annotate page. The BCC model itself is in ``countboard.quantify``.
"""
