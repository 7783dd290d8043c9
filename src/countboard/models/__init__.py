"""Model interfaces (``base``) and what every backend shares (``hf_loading``: offline-first hub loading;
``asked``: the one adapter of models asked in words, VLMs and chat LMs, with ``answers`` to read their counts).

The backends themselves live with their protocol: counters in ``countboard.counting.models``, image generators in
``countboard.numeracy.models``, explainers in ``countboard.grounding.models``, text generators and classifiers in
``countboard.acs.models``. To add a model: subclass the interface of its kind in ``base`` in a module of the
domain's ``models/`` package, accept ``device`` in the constructor, and add ``conf/model/<name>.yaml`` with
``_target_``, ``name`` and ``kind`` (``counter``, ``generator``, ``vlm``, ``text_generator``; classifiers are picked
with ``task/classifier=<name>``). A model asked in words is not a new backend: a domain wraps
``asked.AskedModel`` (``counting.models.vlm``, ``acs.models.llm_zeroshot``), turning its item into a question and the
parsed answer into its record.
"""
