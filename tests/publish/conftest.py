"""Small indexed stores the publication tests publish: every schema family with artifacts, and one whose model
names hold HTML."""

from __future__ import annotations

import pytest

from countboard.index import build_index
from tests.fixtures.synthetic_store import make_store, specs_from_schema

HOSTILE = '<img src=x onerror="alert(1)">&amp;'


def _indexed(root, specs, seed):
    store = make_store(root / "store", specs, seed=seed)
    db = root / "index.duckdb"
    build_index(store.uri, db)
    return store, db


@pytest.fixture(scope="session")
def small_index(tmp_path_factory):
    """Every family of the schema, 3 models each, the counters on two datasets; a counter named as a paper's."""
    specs = specs_from_schema(models_per_family=3, datasets=("fsc147",))
    counters = next(s for s in specs if s.family == "counters")
    counters.datasets = ["fsc147", "carpk"]
    counters.models[0] = "DAVE"
    return _indexed(tmp_path_factory.mktemp("pub_small"), specs, seed=7)


@pytest.fixture(scope="session")
def hostile_index(tmp_path_factory):
    specs = [s for s in specs_from_schema(models_per_family=2, datasets=("fsc147",)) if s.family == "counters"]
    specs[0].models[1] = HOSTILE
    return _indexed(tmp_path_factory.mktemp("pub_hostile"), specs, seed=3)
