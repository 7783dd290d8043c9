"""The local one-cell-per-GPU launcher, on fake GPU ids: each cell's process sees only its GPU."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from countboard.errors import ConfigError
from countboard.tracking.local_gpu import parse_gpus
from tests.conftest import FIXTURES, run_sweep, store_runs

TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config"]


def test_gpu_ids_from_the_option_or_the_environment():
    assert parse_gpus("0, 2") == ["0", "2"]
    assert parse_gpus([1, 3]) == ["1", "3"]
    assert parse_gpus(5) == ["5"]
    assert parse_gpus(None, {"CUDA_VISIBLE_DEVICES": "4,5"}) == ["4", "5"]
    with pytest.raises(ConfigError, match="names a GPU twice"):
        parse_gpus("1,1")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without GPUs")
def test_no_gpu_is_one_clear_error():
    with pytest.raises(ConfigError, match="hydra.launcher.gpus=0,1"):
        parse_gpus(None, {})


def _overlap(a: pd.Series, b: pd.Series) -> bool:
    return a["start_time"] < b["end_time"] and b["start_time"] < a["end_time"]


@pytest.mark.slow
def test_cells_run_in_parallel_one_per_gpu_with_the_usual_parent_and_skip(tmp_path):
    grid = [*TOY, "-m", "model=toy,toy_double", "task=toy,toy_b", "task.delay_s=0.15", "hydra/launcher=local_gpu",
            "hydra.launcher.gpus=[3,5]"]
    run_sweep(grid, tmp_path)
    runs = store_runs(tmp_path / "mlruns")
    cells = runs[runs["tags.countboard.role"] == "cell"].reset_index(drop=True)
    parents = runs[runs["tags.countboard.role"] == "sweep"]
    assert len(cells) == 4 and set(cells["status"]) == {"FINISHED"}
    assert len(parents) == 1 and set(cells["tags.mlflow.parentRunId"]) == {parents["run_id"].iloc[0]}
    assert set(cells["tags.gpu"]) == {"3", "5"}  # each cell's own CUDA_VISIBLE_DEVICES: one GPU
    for gpu, group in cells.groupby("tags.gpu"):
        rows = [r for _, r in group.iterrows()]
        assert not any(_overlap(a, b) for i, a in enumerate(rows) for b in rows[i + 1:]), gpu  # one cell per GPU
    assert any(_overlap(a, b) for _, a in cells[cells["tags.gpu"] == "3"].iterrows()
               for _, b in cells[cells["tags.gpu"] == "5"].iterrows())  # the two GPUs worked at the same time
    proc = run_sweep(grid, tmp_path)
    assert (proc.stdout + proc.stderr).count("skip toy") == 4
