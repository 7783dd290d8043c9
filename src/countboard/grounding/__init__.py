"""Grounding (Q-GroundCAM): GradCAM maps of vision-language models scored against boxes.

- ``datasets/``: Flickr30K Entities, RefCOCO+, SpatialSense (published formats) and a generated set.
- ``models/``: explainers (each a ``countboard.models.base.GroundingModel``): CLIP and BLIP GradCAM, baselines.
- ``tasks/``: ``grounding``. Metric formulas are in ``countboard.metrics.grounding``.
"""
