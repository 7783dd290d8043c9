"""Numeracy protocols: automatic evaluation of generated images, corrected by BCC.

``COMPARED``: the tasks whose cells ``countboard compare`` ranks generators by (the generator is the ``model``, the
automatic ``evaluator`` is the classifier).
"""

from countboard.quantify.compared import ComparedTask
from countboard.tracking import tags as tg

COMPARED = (ComparedTask("geckonum_autoeval", generator_tag=tg.MODEL, classifier_tag=tg.EVALUATOR,
                         cells_family="generator_autoeval"),)
