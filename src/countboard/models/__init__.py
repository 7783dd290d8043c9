"""Models: counters, generators, evaluators, VLMs, text generators and classifiers — one file per backend.

To add a counter: subclass ``countboard.models.base.Counter`` (implement ``decode``; override ``encode_images`` if
the image encoder is worth caching), accept ``device`` in the constructor, and add ``conf/model/<name>.yaml`` with
``_target_``, ``name`` and ``kind: counter``. Text-to-image generators implement the interface of
``generator_base`` (prompts × seeds → images, ``kind: generator``); text generators that of ``text_generator``
(prompts → texts, ``kind: text_generator``); sentiment classifiers live in ``text_classifiers`` and are picked with
``task/classifier=<name>``; grounded VLMs expose a GradCAM map (``gradcam``, ``kind: vlm``).
"""
