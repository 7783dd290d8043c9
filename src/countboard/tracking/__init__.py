"""MLflow tracking: the only package that imports mlflow (besides the index builder).

``store.Tracker`` wraps ``MlflowClient`` with retries for SQLite lock contention, a reachability check that runs
before any compute, run lookup by ``config_hash``, and artifact helpers. ``address`` turns what a command was
given (``--store``, ``$COUNTBOARD_STORE``, …) into a folder, a URI and an index path, once; ``store.open_store``
opens it. ``local_store`` creates the SQLite store atomically; ``lease`` gives a cell one owner; ``checkpoints``
writes and checks checkpoint parts; ``callbacks.SweepCallback`` creates and closes the parent run of a multirun;
``manifest`` keeps a run's artifact listing in its tags when it ends (``Tracker.set_status``), so the index need
not list it. To log a one-off run (an import, a training) use
``Tracker.log_complete_run``.
"""

__all__ = ["RunRecord", "Tracker", "tracker_from_config"]


def __getattr__(name: str):
    """``Tracker`` and friends from ``store``, imported on first use: reading ``tracking.tags`` or ``address``
    (as every command's ``--help`` does) does not load the store client."""
    if name in __all__:
        from countboard.tracking import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
