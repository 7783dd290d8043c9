"""Session services for the integration tests: PostgreSQL + `countboard server`, and a single-node SLURM cluster.

Selected with ``pytest -m integration`` (``.ci/run`` runs them after the unit suite); skipped with the reason only
where the services cannot be installed (no root for apt, no apt).
"""

from __future__ import annotations

import os

import pytest

from tests.integration import services


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
