"""Indexes the leaderboard tests run against: a generated store with every schema family, and an empty one."""

from __future__ import annotations

import sys

import pytest
from tests.fixtures.synthetic_store import make_store, specs_from_schema

from countboard.index import build_index
from countboard.paths import leaderboard_dir

# The app's modules import each other by name, as under `streamlit run`.
if str(leaderboard_dir()) not in sys.path:
    sys.path.insert(0, str(leaderboard_dir()))


@pytest.fixture(scope="session")
def filled_index(tmp_path_factory):
    """Every family of the schema: 3 models, with artifacts, indexed; the first family on 2 datasets."""
    root = tmp_path_factory.mktemp("lb_store")
    specs = specs_from_schema(models_per_family=3, datasets=("fsc147",))
    specs[0].datasets = ["fsc147", "carpk"]
    store = make_store(root, specs, seed=7)
    db = root / "index.duckdb"
    build_index(store.uri, db)
    return store, db


@pytest.fixture(scope="session")
def empty_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("lb_empty")
    store = make_store(root, [], seed=0)
    db = root / "index.duckdb"
    build_index(store.uri, db)
    return store, db


@pytest.fixture(scope="session", autouse=True)
def _release_cached_connections():
    """Drop the app's cached DuckDB connections before the interpreter exits (else DuckDB reports leaks)."""
    yield
    import gc

    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()
    gc.collect()
