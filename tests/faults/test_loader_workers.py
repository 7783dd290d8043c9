"""Loader workers and ``batch_size=auto`` in real sweeps: a corrupt image is one failed unit, a ``kill -9`` in the
middle of the cell resumes, and the records equal those of a sweep that decodes in its own process."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from countboard.counting.datasets import fsc147
from countboard.counting.datasets.synthetic_shapes import SyntheticShapes
from tests.conftest import run_sweep, sweep_env
from tests.faults.conftest import cell_runs

SHAPES = dict(image_size=(48, 48), size_range=(5.0, 8.0), count_range=(1, 10), n_classes=4,
              images_per_class={"train": 0, "val": 0, "test": 3}, multi_class_images=0)


def _args(root, task: str) -> list[str]:
    return ["model=oracle", f"task={task}", "dataset=synthetic_shapes", f"dataset.root={root}",
            "dataset.image_size=[48,48]", "dataset.size_range=[5,8]", "dataset.count_range=[1,10]",
            "dataset.n_classes=4", "dataset.images_per_class={train:0,val:0,test:3}", "dataset.multi_class_images=0",
            "checkpoint_every=4"]


def _samples(store):
    cells = cell_runs(store)
    assert len(cells) == 1 and cells["status"].iloc[0] == "FINISHED"
    art = next(store.glob(f"artifacts/*/{cells['run_id'].iloc[0]}/artifacts"))
    failures = json.loads((art / "failures.json").read_text())
    samples = pd.read_parquet(art / "samples.parquet").sort_values("unit_id").reset_index(drop=True)
    return samples, failures, cells.iloc[0]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["praco_negative", "praco_mosaic"])
def test_workers_survive_a_corrupt_image_and_a_kill_with_the_records_of_no_workers(tmp_path, task):
    root = tmp_path / "shapes"
    ds = SyntheticShapes(root, **SHAPES)
    victim = ds.images_of(ds.classes[2])[1]
    (root / fsc147.IMAGE_DIR / victim).write_bytes(b"\xff\xd8\xff\xe0 cut short")
    args = _args(root, task)

    plain = tmp_path / "plain"
    run_sweep([*args, "num_workers=0", "batch_size=3"], tmp_path, store=plain)
    ahead = tmp_path / "ahead"
    with_workers = [*args, "num_workers=2", "batch_size=auto"]
    killed = run_sweep(with_workers, tmp_path, store=ahead, check=False,
                       env=sweep_env(tmp_path, COUNTBOARD_FAILPOINT="checkpoint_write"))
    assert killed.returncode == -9, killed.stderr[-3000:]
    run_sweep(with_workers, tmp_path, store=ahead)

    (want, want_failed, _), (got, got_failed, cell) = _samples(plain), _samples(ahead)
    pd.testing.assert_frame_equal(got.drop(columns="figure_png", errors="ignore"),
                                  want.drop(columns="figure_png", errors="ignore"))
    assert got_failed == want_failed and got_failed
    assert all(victim in f["unit_id"] or victim in f["error"] for f in got_failed)
    assert cell["metrics.n_failed_samples"] == len(got_failed)
    assert cell["params.num_workers"] == "2" and cell["params.batch_size"] == "auto"
