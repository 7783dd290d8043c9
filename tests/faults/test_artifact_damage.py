"""A run's artifact cut short, deleted or altered after it ended: ``doctor`` names the run and each file against
its manifest, ``index --scan`` reports the same count, ``doctor --fix`` marks the run for recompute without
deleting a byte, and the next sweep finishes it again with every unit. Real processes on a copy of a real store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_sweep
from tests.faults.conftest import TOY, cell_runs, countboard

pytestmark = pytest.mark.slow


def _damage(art: Path, how: str) -> dict[str, bytes]:
    """Damage the run's files; returns the bytes each damaged file that is still there must keep."""
    if how == "cut and deleted":
        cut = (art / "config.yaml").read_bytes()[: (art / "config.yaml").stat().st_size // 2]
        (art / "config.yaml").write_bytes(cut)
        (art / "samples.parquet").unlink()
        return {"config.yaml": cut}
    part = next((art / "checkpoints").glob("part-*.parquet"))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size: only the checksum in its name tells
    part.write_bytes(bytes(data))
    return {f"checkpoints/{part.name}": bytes(data)}


@pytest.mark.parametrize("how", ["cut and deleted", "checkpoint altered"])
def test_damaged_artifacts_are_named_counted_and_recomputed(store_copy, tmp_path, how):
    (run_id,) = cell_runs(store_copy)["run_id"]
    art = next(store_copy.glob(f"artifacts/*/{run_id}/artifacts"))
    kept = _damage(art, how)
    index_db = str(tmp_path / "i.duckdb")

    listed = countboard("doctor", "--store", str(store_copy), "--db", index_db, cwd=tmp_path)
    lines = [line for line in listed.stdout.splitlines() if line.startswith("[artifacts]")]
    assert listed.returncode == 1 and len(lines) == 1 and f"run {run_id} (" in lines[0], listed.stdout
    for path in kept:
        assert f"{path}: " in lines[0]
    if how == "cut and deleted":
        assert "samples.parquet: missing" in lines[0] and "bytes, its manifest says" in lines[0]
    else:
        assert "its name says" in lines[0]
    index = countboard("index", "--scan", "--store", str(store_copy), "--db", index_db, cwd=tmp_path)
    assert index.returncode == 0 and "; 1 runs whose files differ from their manifest" in index.stdout, index.stdout
    assert f"run {run_id} (" in index.stderr

    fixed = countboard("doctor", "--store", str(store_copy), "--db", index_db, "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    for path, data in kept.items():  # nothing deleted: the damaged bytes kept beside the name
        (aside,) = art.glob(f"{path}.damaged-*")
        assert aside.read_bytes() == data
    assert cell_runs(store_copy)["status"].tolist() == ["FAILED"]

    run_sweep(TOY, tmp_path, store=store_copy)
    cells = cell_runs(store_copy)
    assert cells["run_id"].tolist() == [run_id] and cells["status"].tolist() == ["FINISHED"]
    assert cells["metrics.n_samples"].tolist() == [12.0]
    assert (art / "samples.parquet").is_file() and (art / "config.yaml").is_file()
    again = countboard("index", "--scan", "--store", str(store_copy), "--db", index_db, cwd=tmp_path)
    assert "; 0 runs whose files differ" in again.stdout, again.stdout + again.stderr
    clean = countboard("doctor", "--store", str(store_copy), "--db", index_db, cwd=tmp_path)
    assert "store is consistent" in clean.stdout, clean.stdout + clean.stderr


def test_damaged_artifacts_can_be_accepted_as_they_are(store_copy, tmp_path):
    (run_id,) = cell_runs(store_copy)["run_id"]
    art = next(store_copy.glob(f"artifacts/*/{run_id}/artifacts"))
    kept = _damage(art, "cut and deleted")
    index_db = str(tmp_path / "i.duckdb")
    fixed = countboard("doctor", "--store", str(store_copy), "--db", index_db, "--fix", "--damaged-runs", "accept",
                       cwd=tmp_path)
    assert fixed.returncode == 0 and "record its files as they are now" in fixed.stdout, fixed.stdout + fixed.stderr
    assert (art / "config.yaml").read_bytes() == kept["config.yaml"] and not list(art.glob("*.damaged-*"))
    assert cell_runs(store_copy)["status"].tolist() == ["FINISHED"]
    clean = countboard("doctor", "--store", str(store_copy), "--db", index_db, cwd=tmp_path)
    assert "[artifacts]" not in clean.stdout, clean.stdout
