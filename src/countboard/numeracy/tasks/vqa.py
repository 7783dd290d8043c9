"""``geckonum_vqa``: GeckoNum's VQA benchmark (appendix D), the classic counting protocol ranked on the Numeracy page.

The same units, records and metrics as ``task=classic`` (``countboard.counting.tasks.classic``) on
``dataset=geckonum_release``: each image-question pair counted with its noun, exact-count accuracy with a bootstrap
interval, by ground-truth number per generator's images (Fig. A18) and by prompt type; its runs form the family
``geckonum_vqa`` shown with the generators' numeracy.
"""

from __future__ import annotations

from countboard.counting.tasks.classic import ClassicCounting


class GeckoNumVQA(ClassicCounting):
    """Counters and VLMs on GeckoNum's image-question pairs (see the module docstring)."""

    name = "geckonum_vqa"
    family = "geckonum_vqa"
