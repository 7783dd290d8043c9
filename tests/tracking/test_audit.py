"""A run's files against its artifact manifest: missing, another size, a checkpoint part whose checksum differs."""

from __future__ import annotations

import hashlib
import json

from countboard.tracking.audit import Damage, differences


def test_missing_and_resized_files_are_named():
    expected = [("checkpoints", True, None), ("config.yaml", False, 621), ("samples.parquet", False, 900),
                ("tables/t.parquet", False, 50)]
    actual = [("config.yaml", False, 310), ("tables", True, None), ("tables/t.parquet", False, 50),
              ("extra.json", False, 3)]
    assert differences(expected, actual) == [("config.yaml", "310 bytes, its manifest says 621"),
                                             ("samples.parquet", "missing")]
    assert differences(expected[:1], []) == []  # folders are not files


def test_a_checkpoint_part_that_no_longer_matches_its_name_is_named_unless_set_aside(tmp_path):
    data = b"parquet bytes"
    name = f"checkpoints/part-00000-{hashlib.sha256(data).hexdigest()[:16]}.parquet"
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / name).write_bytes(b"PARQUET BYTES")  # the same size, other bytes
    listing = [(name, False, len(data))]
    assert differences(listing, listing, tmp_path) == [
        (name, f"checksum {hashlib.sha256(b'PARQUET BYTES').hexdigest()[:16]}, its name says {name[23:39]}")]
    assert differences(listing, listing) == []  # no local folder: sizes only
    (tmp_path / "checkpoints" / "quarantine.json").write_text(json.dumps([{"part": name, "reason": "x"}]))
    assert differences(listing, listing, tmp_path) == []


def test_a_damage_is_one_line():
    damage = Damage("r1", "toy · toy · toy", tuple((f"f{i}", "missing") for i in range(7)))
    assert damage.line() == ("run r1 (toy · toy · toy): f0: missing; f1: missing; f2: missing; f3: missing; "
                             "f4: missing; and 2 more")
