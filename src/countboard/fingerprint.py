"""The identity of a dataset's data, for ``config_hash``: what the files are, not where they are.

A dataset that declares ``version`` (a string attribute) or ``fingerprint()`` is identified by it. Otherwise every
path in its config node (``root`` and any key ending in ``_dir``, ``_file`` or ``_path``) that exists is
fingerprinted from its files: relative path and size of each file, plus the content of metadata files (annotations,
lists, splits) and the head and tail of larger files. Copying the data elsewhere keeps the fingerprint; editing an
annotation or adding an image changes it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_PATH_KEYS = ("root",)
_PATH_SUFFIXES = ("_dir", "_file", "_path")
_META_SUFFIXES = {".json", ".csv", ".tsv", ".txt", ".yaml", ".yml", ".xml", ".p", ".pkl", ".jsonl"}
_FULL_LIMIT = 4 << 20
_EDGE = 64 << 10


def _file_digest(path: Path, size: int) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        if path.suffix.lower() in _META_SUFFIXES and size <= _FULL_LIMIT:
            h.update(fh.read())
        elif path.suffix.lower() in _META_SUFFIXES:  # a large one: head and tail (with the size) tell versions apart
            h.update(fh.read(_EDGE))
            fh.seek(size - _EDGE)
            h.update(fh.read(_EDGE))
    return h.digest()


def path_fingerprint(path: str | os.PathLike) -> str:
    """Fingerprint of a file or a directory tree (hidden files and ``__pycache__`` ignored).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "a.txt").write_text("1")
        >>> path_fingerprint(d) == path_fingerprint(d)
        True
    """
    root = Path(path)
    h = hashlib.sha256()
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts))
    for p in files:
        size = p.stat().st_size
        rel = p.name if p == root else p.relative_to(root).as_posix()
        h.update(f"{rel}\0{size}\0".encode())
        h.update(_file_digest(p, size))
    return h.hexdigest()[:16]


def _paths(node: Mapping[str, Any]) -> list[tuple[str, Path]]:
    out = []
    for key, value in node.items():
        if not isinstance(value, str) or not (key in _PATH_KEYS or key.endswith(_PATH_SUFFIXES)):
            continue
        path = Path(value).expanduser()
        if not path.is_absolute() and "root" in node and key != "root":
            path = Path(str(node["root"])).expanduser() / value
        if path.exists():
            out.append((key, path))
    return out


def dataset_fingerprint(dataset: Any, node: Mapping[str, Any]) -> str | None:
    """Identity of ``dataset``'s data, or None when the config alone identifies it (generated data).

    Args:
        dataset: The instantiated dataset.
        node: Its resolved config node (``cfg.dataset`` as a dict).
    """
    if callable(getattr(dataset, "fingerprint", None)):
        return f"declared:{dataset.fingerprint()}"
    version = getattr(dataset, "version", None)
    if isinstance(version, str) and version:
        return f"version:{version}"
    parts = [f"{key}={path_fingerprint(path)}" for key, path in _paths(node)]
    return ";".join(parts) or None
