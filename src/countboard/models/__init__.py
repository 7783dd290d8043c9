"""Models: counters, generators, evaluators, VLMs, text generators and classifiers — one file per backend.

To add a counter: subclass ``countboard.models.base.Counter`` (implement ``decode``; override ``encode_images`` if
the image encoder is worth caching), accept ``device`` in the constructor, and add ``conf/model/<name>.yaml`` with
``_target_``, ``name`` and ``kind: counter``.
"""
