"""Runs whose artifacts differ from their manifest: a file it lists is gone, has another size, or (a checkpoint
part) no longer matches the checksum in its name.

A run that ended through ``Tracker.set_status`` keeps the listing of its files with their sizes in its tags
(``tracking.manifest``); what is on disk later is compared with it here. ``countboard doctor`` names each run and
file, and ``--fix`` marks the run FAILED with the reason, keeping every byte (a local store's differing files are
renamed ``<name>.damaged-<time>`` beside themselves, so the resumed run writes them again); ``countboard index
--scan`` reports the same count. A run without a usable manifest (running, reopened, written by other tools) is
not checked: there is nothing to compare with.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from countboard.tracking import manifest
from countboard.tracking.checkpoints import QUARANTINE, checksum_mismatch


@dataclass(frozen=True)
class Damage:
    """The files of one run that differ from its manifest, each with what differs."""

    run_id: str
    name: str
    files: tuple[tuple[str, str], ...]

    def line(self) -> str:
        shown = "; ".join(f"{path}: {why}" for path, why in self.files[:5])
        more = f"; and {len(self.files) - 5} more" if len(self.files) > 5 else ""
        return f"run {self.run_id} ({self.name}): {shown}{more}"


def _local_dir(repo) -> Path | None:
    folder = getattr(repo, "artifact_dir", None)  # a local repository; a server's has none
    return Path(folder) if folder else None


def differences(expected: manifest.Listing, actual: manifest.Listing, folder: Path | None = None
                ) -> list[tuple[str, str]]:
    """``(path, what differs)`` of each file of ``expected`` (a manifest's listing) that ``actual`` (the listing
    now) lacks or has with another size; with ``folder`` (the run's local artifact folder) also checkpoint parts
    whose bytes no longer match the checksum in their name, unless ``checkpoints/quarantine.json`` already set
    them aside.

    Example:
        >>> differences([("a.yaml", False, 10), ("b.parquet", False, 5)], [("a.yaml", False, 4)])
        [('a.yaml', '4 bytes, its manifest says 10'), ('b.parquet', 'missing')]
    """
    now = {path: size for path, is_dir, size in actual if not is_dir}
    quarantined = set()
    if folder is not None and (folder / QUARANTINE).is_file():
        try:
            quarantined = {q["part"] for q in json.loads((folder / QUARANTINE).read_text())}
        except (OSError, ValueError, KeyError, TypeError):
            quarantined = set()
    out = []
    for path, is_dir, size in expected:
        if is_dir:
            continue
        if path not in now:
            out.append((path, "missing"))
        elif size is not None and now[path] is not None and now[path] != size:
            out.append((path, f"{now[path]} bytes, its manifest says {size}"))
        elif folder is not None and path not in quarantined and (why := checksum_mismatch(folder / path)):
            out.append((path, why))
    return out


def check_run(tracker, run_id: str) -> Damage | None:
    """The files of run ``run_id`` that differ from its manifest, None when all match or it keeps none."""
    from countboard.tracking.tags import RUN_NAME

    run = tracker.client.get_run(run_id)
    expected = manifest.decode(run.data.tags, run.info.status, run.info.end_time)
    if expected is None:
        return None
    repo = tracker.artifact_repository(run.info.artifact_uri)
    found = differences(expected, manifest.list_tree(repo), _local_dir(repo))
    return Damage(run_id, run.data.tags.get(RUN_NAME, ""), tuple(found)) if found else None


def damaged_runs(tracker) -> list[Damage]:
    """Every run of the store's active experiments whose artifacts differ from its manifest."""
    out = []
    for exp in tracker.experiments():
        for run in tracker.find_runs(exp.experiment_id, {}):
            if run.status != "RUNNING" and (damage := check_run(tracker, run.run_id)) is not None:
                out.append(damage)
    return out


def mark_for_recompute(tracker, damage: Damage) -> None:
    """End the run FAILED with the differing files named in its ``error`` tag, so that the next sweep of the cell
    resumes it; in a local store each differing file still there is renamed ``<name>.damaged-<time>`` first (kept,
    and written again by the resumed run). Nothing is deleted."""
    from countboard.tracking.tags import ERROR

    repo = tracker.artifact_repository(tracker.client.get_run(damage.run_id).info.artifact_uri)
    folder = _local_dir(repo)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    if folder is not None:
        for path, _ in damage.files:
            if (folder / path).is_file():
                (folder / path).rename(folder / f"{path}.damaged-{stamp}")
    tracker.set_tags(damage.run_id, {ERROR: "artifacts differ from the run's manifest: " + "; ".join(
        f"{p}: {why}" for p, why in damage.files)[:4000]})
    tracker.set_status(damage.run_id, "FAILED")
