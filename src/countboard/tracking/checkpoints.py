"""Checkpoint parts of a run: ``checkpoints/part-NNNNN-<sha256[:16]>.parquet``, each checked when read back.

A part whose bytes do not match the checksum in its name, or that pyarrow cannot read, is set aside: it is listed
in ``checkpoints/quarantine.json`` (with the reason) and never read again, and its units are computed again.
Artifacts cannot be moved through every store's API, so the list is what moves a part aside.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from countboard.tracking import failpoints

log = logging.getLogger("countboard")

CHECKPOINT_DIR = "checkpoints"
QUARANTINE = f"{CHECKPOINT_DIR}/quarantine.json"
_PART = re.compile(r"part-(\d{5,})(?:-([0-9a-f]{16}))?\.parquet$")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def checksum_mismatch(path: Path) -> str | None:
    """Why the part at ``path`` does not match the checksum in its name, or None (it matches, or its name keeps
    none)."""
    match = _PART.search(path.name)
    if match is None or match.group(2) is None:
        return None
    got = _sha(path)
    return None if got == match.group(2) else f"checksum {got}, its name says {match.group(2)}"


def _quarantined(tracker, run_id: str, names: Sequence[str], tmp: str) -> list[dict]:
    if QUARANTINE not in names:
        return []
    try:
        return json.loads(tracker.download(run_id, QUARANTINE, tmp).read_text())
    except (OSError, ValueError) as exc:
        log.warning("run %s: %s unreadable (%s); checking every part again", run_id, QUARANTINE, exc)
        return []


def _read_part(path: Path, expected: str | None) -> pd.DataFrame:
    if expected is not None and (why := checksum_mismatch(path)):
        raise ValueError(f"{why} (truncated or altered)")
    frame = pd.read_parquet(path)
    if "unit_id" not in frame.columns:
        raise ValueError("no unit_id column")
    return frame


def load(tracker, run_id: str) -> tuple[list[pd.DataFrame], int]:
    """Records of the run's good parts, and the index the next part takes.

    Bad parts are added to the quarantine list (logged once) and skipped.
    """
    names = tracker.list_artifacts(run_id, CHECKPOINT_DIR)
    frames, bad, next_index = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        quarantined = _quarantined(tracker, run_id, names, tmp)
        skip = {q["part"] for q in quarantined}
        for name in sorted(names):
            match = _PART.search(name)
            if not match:
                continue
            next_index = max(next_index, int(match.group(1)) + 1)
            if name in skip:
                continue
            local = tracker.download(run_id, name, tmp)  # a store that cannot be reached fails the run instead
            try:
                frames.append(_read_part(local, match.group(2)))
            except Exception as exc:  # checksum, pyarrow and read errors of the bytes we hold: set the part aside
                reason = f"{type(exc).__name__}: {str(exc)[:300]}"
                log.warning("run %s: checkpoint %s is damaged (%s); set aside in %s, its units are computed again",
                            run_id, name, reason, QUARANTINE)
                bad.append({"part": name, "reason": reason})
        if bad:
            tracker.log_json(run_id, quarantined + bad, QUARANTINE)
    return frames, next_index


def write(tracker, run_id: str, index: int, records: list[dict]) -> str:
    """Write one part (its checksum in its name); returns its artifact path."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "part.parquet"
        pd.DataFrame.from_records(records).to_parquet(path, index=False)
        final = path.with_name(f"part-{index:05d}-{_sha(path)}.parquet")
        path.rename(final)
        failpoints.hit("checkpoint_write")
        tracker.log_file(run_id, final, CHECKPOINT_DIR)
    return f"{CHECKPOINT_DIR}/{final.name}"
