"""The DuckDB run index: derived data that can always be rebuilt from the MLflow store.

``build_index(store_uri, db_path)`` reads the store through ``MlflowClient`` (paged) into the tables of ``ddl``
(runs, params, tags, latest metrics, metric history, artifacts) and one view per family; later calls only touch runs
that changed. ``artifacts.resolve_artifact`` maps an indexed artifact path to a local file without leaving the run's
artifact directory. To index a new run attribute, add a column in ``ddl.TABLES``, fill it in
``source.RunSnapshot.row`` and bump ``ddl.SCHEMA_VERSION`` (old indexes are then rebuilt).
"""

import importlib

# Loaded on first use: the builder pulls in DuckDB, pandas and MLflow, which ``countboard --help`` and the
# light submodules (``ui_address``, ``updates``) must not pay for.
_LAZY = {"IndexStats": "builder", "build_index": "builder"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
