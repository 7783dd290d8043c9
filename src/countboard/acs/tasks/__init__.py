"""Attribute-control protocols: ``bcc`` and ``text_acs``.

``COMPARED``: the tasks whose cells ``countboard compare`` ranks generators by, with the tags that name a cell's
generator and classifier (a ``bcc`` cell is one classifier, the ``model``, over one ``generator``'s outputs).
"""

from countboard.quantify.compared import ComparedTask
from countboard.tracking import tags as tg

COMPARED = (
    ComparedTask("bcc", generator_tag=tg.GENERATOR, classifier_tag=tg.MODEL),
    ComparedTask("text_acs", generator_tag=tg.MODEL, classifier_tag=tg.CLASSIFIER),
)
