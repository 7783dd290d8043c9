"""Turn a ``TaskResult`` into run artifacts: Parquet tables, PNG figures, NPZ arrays, files."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.results import TaskResult
from countboard.tracking.store import Tracker


def _save_figure(fig, path: Path) -> None:
    if isinstance(fig, (bytes, bytearray)):
        path.write_bytes(fig)
        return
    if hasattr(fig, "savefig"):
        import matplotlib.pyplot as plt

        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        return
    if hasattr(fig, "save"):  # PIL image
        fig.save(path)
        return
    raise TypeError(f"figure of type {type(fig).__name__} cannot be saved as PNG")


def write_result(tracker: Tracker, run_id: str, result: TaskResult, records: pd.DataFrame,
                 failed: pd.DataFrame) -> None:
    """Log everything of a finished job in one artifact upload."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        records.to_parquet(root / "samples.parquet", index=False)
        (root / "failures.json").write_text(json.dumps(failed.to_dict("records"), indent=2, default=str))
        for name, table in result.tables.items():
            (root / "tables").mkdir(exist_ok=True)
            table.to_parquet(root / "tables" / f"{name}.parquet", index=False)
        for name, fig in result.figures.items():
            (root / "figures").mkdir(exist_ok=True)
            _save_figure(fig, root / "figures" / f"{name}.png")
        for name, arrays in result.arrays.items():
            (root / "arrays").mkdir(exist_ok=True)
            np.savez_compressed(root / "arrays" / f"{name}.npz", **arrays)
        for name, src in result.files.items():
            (root / "files").mkdir(exist_ok=True)
            shutil.copy(src, root / "files" / name)
        tracker.log_dir(run_id, root)
    if result.tags:
        tracker.set_tags(run_id, result.tags)
