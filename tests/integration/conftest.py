"""Session services for the integration tests: PostgreSQL + `countboard server`, and a single-node SLURM cluster.

Selected with ``pytest -m integration`` (``.ci/run`` runs them after the unit suite); skipped with the reason only
where the services cannot be installed (no root for apt, no apt).
"""

from __future__ import annotations

import os

import pytest

from tests.integration import services


def pytest_collection_modifyitems(config, items):
    """Run these tests only when a ``-m`` expression names them: ``-m "not slow"`` replaces the default
    ``-m "not integration"`` of pyproject.toml and would otherwise start the services."""
    if "integration" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("integration") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


def _start(factory, *args, **kwargs):
    try:
        return factory(*args, **kwargs)
    except services.Unavailable as exc:
        pytest.skip(f"service unavailable: {exc}")


@pytest.fixture(scope="session")
def postgres():
    pg = _start(services.start_postgres)
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def mlflow_server(postgres):
    server = services.start_mlflow_server(postgres.uri, {**os.environ, "MLFLOW_ENABLE_ASYNC_LOGGING": "false"})
    yield server
    server.stop()


@pytest.fixture(scope="session")
def slurm():
    cluster = _start(services.start_slurm, cpus=2, accounting=True)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session", autouse=True)
def _release_cached_connections():
    """Drop the leaderboard's cached DuckDB connections before the interpreter exits (else DuckDB reports leaks)."""
    yield
    import gc
    import sys

    if "streamlit" in sys.modules:
        import streamlit as st

        st.cache_resource.clear()
        st.cache_data.clear()
    gc.collect()
