"""Image datasets of the counting protocol (FSC-147 layout) and the mosaics built from them.

Each released benchmark is read as its publisher ships it: one module per dataset (an ``ImageDataset`` subclass that
refuses a missing file with one ``DataNotFoundError`` line naming what to download from where), one
``conf/dataset/<name>.yaml``, and a fixture written in the same layout (``tests/fixtures``). Question sets
(PixMo-Count, TallyQA, CountQA, CAPTURe) mix in ``questions.QuestionSet``.
"""
