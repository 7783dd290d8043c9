"""The DuckDB run index: derived data that can always be rebuilt from the MLflow store.

``build_index(store_uri, db_path)`` reads the store through ``MlflowClient`` (paged) into the tables of ``ddl``
(runs, params, tags, latest metrics, metric history, artifacts) and one view per family; later calls only touch runs
that changed. ``artifacts.resolve_artifact`` maps an indexed artifact path to a local file without leaving the run's
artifact directory. To index a new run attribute, add a column in ``ddl.TABLES``, fill it in
``source.RunSnapshot.row`` and bump ``ddl.SCHEMA_VERSION`` (old indexes are then rebuilt).
"""

from countboard.index.builder import IndexStats, build_index

__all__ = ["IndexStats", "build_index"]
