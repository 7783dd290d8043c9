"""A small generated store shared by the index tests (built once per module: it takes a few seconds)."""

from __future__ import annotations

import pytest
from tests.fixtures.synthetic_store import FamilySpec, make_store

SPECS = [
    FamilySpec("counters", {"cnt_f1": True, "mae": False, "n_samples": None}, ["alpha", "beta", "gamma"],
               ["fsc147", "carpk"]),
    FamilySpec("grounding", {"iou_soft": True, "io_ratio": True}, ["vlm_a", "vlm_b"], ["refcoco"]),
]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("store"), SPECS, seed=3, history_steps=2)
