"""Tasks turn a model and a dataset into records and metrics (see ``base.Task``).

To add a task: subclass ``countboard.tasks.base.Task`` in a module of its own here, declare its metrics in
``countboard/schema/<area>.yaml``, and add ``conf/task/<name>.yaml`` with ``_target_`` pointing at the class.
"""
