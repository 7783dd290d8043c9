"""A run's artifact manifest: the listing of its files, kept in its own tags from the moment it ends.

Listing a run's artifacts through an MLflow server costs one request per folder, and the index reads thousands of
runs. A run that ends through ``Tracker.set_status`` lists its artifacts once, as the last thing its writer does,
and keeps the listing in tags, which ``search_runs`` returns with the run. The manifest names the end time the run
is then given, and is trusted only while the run still has exactly that end time: a run reopened and ended again
by any tool, or still running, is listed instead, as is a run without a manifest (written by other tools, killed
before it ended). Code that logs into a run after it ended refreshes the manifest with
``Tracker.add_to_ended_run``; the new tag value changes the run's fingerprint, so the index reads the run again.

Format: ``countboard.artifacts`` holds ``{"v": 2, "end": <ms>, "files": [[path, size], ...], "dirs": [...]}`` as
compact JSON (``dirs``: folders with no file under them; the others are implied by the file paths); when that is
longer than one tag value, it is cut into ``countboard.artifacts``, ``countboard.artifacts.1``, … and
``countboard.artifacts.parts`` says how many. ``parts = 0`` says there is no manifest to trust: the run was reopened
(until it ends again) or has too many files for one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from countboard.tracking.tags import MANIFEST as MANIFEST_TAG
from countboard.tracking.tags import MANIFEST_PARTS as PARTS_TAG

VERSION = 2
#: Characters per tag value (``Tracker.set_tags`` keeps 5,000; MLflow allows 8,000).
PART_CHARS = 4800
#: More parts than this (a run with thousands of files) and the run keeps no manifest: the index lists it.
MAX_PARTS = 40
#: What a reopened run's tags say until it ends again (and a run too large for a manifest): list me.
NO_MANIFEST = {PARTS_TAG: "0"}

Listing = list[tuple[str, bool, "int | None"]]


def list_tree(repo, path: str | None = None) -> Listing:
    """``(path, is_dir, file_size)`` of every artifact under ``path`` of an artifact repository, folders included,
    sorted."""
    out: Listing = []
    pending: list[str | None] = [path]
    while pending:
        for info in repo.list_artifacts(pending.pop()):
            out.append((info.path, bool(info.is_dir), info.file_size))
            if info.is_dir:
                pending.append(info.path)
    return sorted(out)


def _folders(paths) -> set[str]:
    """Every folder above ``paths``."""
    return {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}


def encode(listing: Listing, end_ms: int | None) -> dict[str, str]:
    """The manifest tags of a listing, for a run whose end time is (or is about to be set to) ``end_ms``."""
    files = sorted([p, s] for p, is_dir, s in listing if not is_dir)
    implied = _folders(p for p, _ in files)
    empty = sorted(p for p, is_dir, _ in listing if is_dir and p not in implied)
    text = json.dumps({"v": VERSION, "end": end_ms, "files": files, "dirs": empty}, separators=(",", ":"))
    parts = [text[i:i + PART_CHARS] for i in range(0, len(text), PART_CHARS)] or [""]
    if len(parts) > MAX_PARTS:
        return dict(NO_MANIFEST)
    tags = {MANIFEST_TAG if i == 0 else f"{MANIFEST_TAG}.{i}": part for i, part in enumerate(parts)}
    tags[PARTS_TAG] = str(len(parts))
    return tags


def decode(tags: Mapping[str, str], status: str, end_time: int | None) -> Listing | None:
    """The listing a run's manifest describes, folders included, or None when the run must be listed instead:
    no manifest, one that is cut short or unreadable, a run still running, or one whose end time is not the one
    the manifest was written for (ended again since)."""
    if MANIFEST_TAG not in tags or status == "RUNNING" or end_time is None:
        return None
    try:
        n = int(tags.get(PARTS_TAG, "1"))
        if n < 1:
            return None
        doc = json.loads("".join(tags[MANIFEST_TAG if i == 0 else f"{MANIFEST_TAG}.{i}"] for i in range(n)))
        if doc.get("v") != VERSION or doc.get("end") is None or int(doc["end"]) != int(end_time):
            return None
        files = {str(p): (None if s is None else int(s)) for p, s in doc["files"]}
        empty = {str(d) for d in doc.get("dirs", [])}
    except (KeyError, ValueError, TypeError, AttributeError):
        return None
    folders = _folders(files) | empty | _folders(empty)
    return sorted([(p, False, s) for p, s in files.items()] + [(d, True, None) for d in folders])


def is_manifest_tag(key: str) -> bool:
    return key == MANIFEST_TAG or key.startswith(MANIFEST_TAG + ".")
