"""The counting tasks read their images through the job's loader workers and batch through ``ctx.batches``:
the records are the same with 0 or 2 workers, with ``batch_size=auto`` or a fixed size, a corrupt image included."""

from __future__ import annotations

import shutil

import pytest

from countboard.counting.datasets import fsc147
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from countboard.counting.models.oracle import OracleCounter
from countboard.counting.tasks.classic import ClassicCounting
from countboard.counting.tasks.praco import PracoMosaic, PracoNegative
from countboard.inputs import InputStream
from countboard.results import RunContext
from tests.counting.test_praco import SMALL, shapes_root  # noqa: F401 (the module's fixture)


@pytest.fixture(scope="module")
def broken(shapes_root, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("loading") / "broken"
    shutil.copytree(shapes_root, root)
    ds = SyntheticShapes(root, **SMALL)
    (root / fsc147.IMAGE_DIR / ds.images_of(ds.classes[1])[0]).write_bytes(b"\xff\xd8 truncated")
    return ds


def _records(task, dataset, tmp_path, workers: int | None, batch_size, every: int = 4) -> list[dict]:
    """The task's records as the engine computes them: chunks of ``every`` units, one stream over all chunks."""
    ctx = RunContext(device="cpu", seed=0, batch_size=batch_size, work_dir=tmp_path, progress=False)
    units = list(task.units(None, dataset, ctx))
    chunks = [units[i:i + every] for i in range(0, len(units), every)]
    keys = [k for c in chunks for k in task.input_keys(None, dataset, c, ctx)]
    out = []
    with InputStream(dataset.load, keys, workers or 0) as ctx.inputs:
        for chunk in chunks:
            out += task.run_units(OracleCounter(), dataset, chunk, ctx)
    return out


@pytest.mark.parametrize("make_task", [PracoNegative, lambda: PracoMosaic(n_figures=2), ClassicCounting],
                         ids=["negative", "mosaic", "classic"])
def test_same_records_with_workers_and_auto_batches(broken, tmp_path, make_task):
    plain = _records(make_task(), broken, tmp_path, workers=None, batch_size=3)
    failed = [r for r in plain if "error" in r]
    assert failed and len(failed) < len(plain) and all("failed to load" in r["error"] for r in failed)
    assert _records(make_task(), broken, tmp_path, workers=2, batch_size=3) == plain
    assert _records(make_task(), broken, tmp_path, workers=2, batch_size="auto") == plain
    assert _records(make_task(), broken, tmp_path, workers=0, batch_size=1, every=5) == plain
