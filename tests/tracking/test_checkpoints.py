"""Checkpoint parts: checksums in their names, damaged parts set aside once, numbering continues after them."""

from __future__ import annotations

import json

from omegaconf import OmegaConf

from countboard.tracking import checkpoints, tracker_from_config


def test_damaged_part_is_quarantined_once_and_skipped(tmp_path):
    tracker = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(tmp_path / "mlruns")}))
    run = tracker.create_run(tracker.experiment_id("e"), "r", {})
    names = [checkpoints.write(tracker, run, i, [{"unit_id": f"u{i}{j}", "x": j} for j in range(3)])
             for i in range(3)]
    assert all(n.startswith("checkpoints/part-0000") and len(n.split("-")[-1]) == len("0123456789abcdef.parquet")
               for n in names)
    art = next(tmp_path.glob(f"mlruns/artifacts/*/{run}/artifacts"))
    victim = art / names[1]
    victim.write_bytes(victim.read_bytes()[:-10])
    frames, next_index = checkpoints.load(tracker, run)
    assert len(frames) == 2 and next_index == 3
    assert sorted(u for f in frames for u in f["unit_id"]) == ["u00", "u01", "u02", "u20", "u21", "u22"]
    quarantine = json.loads((art / checkpoints.QUARANTINE).read_text())
    assert [q["part"] for q in quarantine] == [names[1]] and "checksum" in quarantine[0]["reason"]
    frames, next_index = checkpoints.load(tracker, run)  # set aside for good: not listed a second time
    assert len(frames) == 2 and next_index == 3
    assert len(json.loads((art / checkpoints.QUARANTINE).read_text())) == 1


def test_parts_without_a_checksum_are_still_read(tmp_path):
    import pandas as pd

    tracker = tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(tmp_path / "mlruns")}))
    run = tracker.create_run(tracker.experiment_id("e"), "r", {})
    old = tmp_path / "part-00000.parquet"  # the layout of earlier versions
    pd.DataFrame({"unit_id": ["a", "b"]}).to_parquet(old)
    tracker.log_file(run, old, checkpoints.CHECKPOINT_DIR)
    frames, next_index = checkpoints.load(tracker, run)
    assert list(frames[0]["unit_id"]) == ["a", "b"] and next_index == 1
