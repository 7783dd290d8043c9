"""Path-safe access to a run's artifacts: local files directly, remote ones through the store into a local cache.

mlflow is imported only when a remote artifact is fetched, so the leaderboard imports this module cheaply.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

from countboard.errors import CountboardError


class ArtifactPathError(CountboardError):
    """An artifact path would leave the run's artifact directory, or the artifacts are not local."""


def artifact_root(artifact_uri: str) -> Path:
    """The local directory of ``artifact_uri`` (``file://…`` or a plain path).

    Example:
        >>> artifact_root("file:///store/artifacts/1/abc/artifacts")
        PosixPath('/store/artifacts/1/abc/artifacts')
    """
    parsed = urlparse(artifact_uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ArtifactPathError(f"artifact URI {artifact_uri!r} names host {parsed.netloc!r}; only local "
                                    "artifacts can be read by the leaderboard")
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and artifact_uri.startswith("/"):
        return Path(artifact_uri)
    raise ArtifactPathError(f"artifacts at {artifact_uri!r} are not on this machine; the leaderboard reads "
                            "local stores only (run it where the store's artifacts are, e.g. beside mlruns/)")


def resolve_artifact(artifact_uri: str, rel_path: str) -> Path:
    """The local file of artifact ``rel_path`` of the run whose artifacts live at ``artifact_uri``.

    ``rel_path`` must be relative, without ``..`` parts, and must still lie inside the artifact directory once
    symbolic links are resolved.

    Example:
        >>> resolve_artifact("file:///store/a/artifacts", "tables/x.parquet")
        PosixPath('/store/a/artifacts/tables/x.parquet')
        >>> resolve_artifact("file:///store/a/artifacts", "../../etc/passwd")
        Traceback (most recent call last):
        ...
        countboard.index.artifacts.ArtifactPathError: artifact path '../../etc/passwd' ...
    """
    _check_relative(rel_path)
    rel = PurePosixPath(rel_path)
    root = artifact_root(artifact_uri).resolve()
    target = (root / rel).resolve()
    if not target.is_relative_to(root):
        raise ArtifactPathError(f"artifact path {rel_path!r} resolves to {target}, outside the run's artifact "
                                f"directory {root}")
    return target


def is_local(artifact_uri: str) -> bool:
    """Whether ``artifact_uri`` is a directory of this machine (``file:`` without a host, or an absolute path)."""
    parsed = urlparse(artifact_uri)
    return (parsed.scheme == "file" and parsed.netloc in ("", "localhost")) or (
        parsed.scheme == "" and artifact_uri.startswith("/"))


def cache_path(cache_dir: str | os.PathLike, artifact_uri: str, rel_path: str) -> Path:
    """Where the local copy of artifact ``rel_path`` of a remote run lives under ``cache_dir``.

    One folder per artifact URI (a run), named by its hash, so two stores or two runs never share a file.
    """
    _check_relative(rel_path)
    key = hashlib.sha256(artifact_uri.encode()).hexdigest()[:24]
    return Path(cache_dir) / key / PurePosixPath(rel_path)


def fetch_artifact(store_uri: str, artifact_uri: str, rel_path: str, cache_dir: str | os.PathLike,
                   size: int | None = None) -> Path:
    """A local file holding artifact ``rel_path`` of a run: its own file for a local store, else a cached copy.

    Remote artifacts (``mlflow-artifacts:/…`` from a server with proxied artifacts, ``s3://…``) are downloaded
    through the store ``store_uri`` once into ``cache_dir`` and reused while their size matches ``size`` (the
    size the index lists; None: any cached copy). The download goes to a temporary name that is renamed into
    place, so a reader never sees half a file.

    Raises:
        ArtifactPathError: ``rel_path`` would leave the run's artifacts.
        Exception: whatever the store raises when the artifact cannot be downloaded.
    """
    if is_local(artifact_uri):
        return resolve_artifact(artifact_uri, rel_path)
    target = cache_path(cache_dir, artifact_uri, rel_path)
    if target.is_file() and (size is None or target.stat().st_size == size):
        return target
    from countboard.index.source import artifact_repository

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        got = Path(artifact_repository(artifact_uri, store_uri).download_artifacts(rel_path, tmp))
        if not got.is_file():
            raise ArtifactPathError(f"artifact {rel_path!r} of {artifact_uri} is a directory, not a file")
        os.replace(got, target)
    return target


def _check_relative(rel_path: str) -> None:
    rel = PurePosixPath(rel_path)
    if not rel_path or "\x00" in rel_path or rel.is_absolute() or ".." in rel.parts or "\\" in rel_path:
        raise ArtifactPathError(f"artifact path {rel_path!r} must be a relative path inside the run's artifacts "
                                "(no '..', no leading '/')")


def relocate_artifact_uri(artifact_uri: str, indexed_store_dir: str | Path | None,
                          store_dir: str | Path | None) -> str:
    """``artifact_uri`` as recorded when the store lived at ``indexed_store_dir``, moved to ``store_dir``.

    Artifact locations are absolute in MLflow; a store copied or moved to another folder keeps pointing at the old
    one. A location inside the old store directory is re-rooted under the new one; anything else (remote
    artifacts, artifacts kept outside the store) is returned as it is.

    Example:
        >>> relocate_artifact_uri("file:///old/store/artifacts/1/abc/artifacts", "/old/store", "/new/place")
        'file:///new/place/artifacts/1/abc/artifacts'
        >>> relocate_artifact_uri("s3://bucket/1/abc", "/old/store", "/new/place")
        's3://bucket/1/abc'
    """
    if indexed_store_dir is None or store_dir is None:
        return artifact_uri
    old, new = Path(indexed_store_dir), Path(store_dir)
    if old == new:
        return artifact_uri
    try:
        root = artifact_root(artifact_uri)
    except ArtifactPathError:
        return artifact_uri
    try:
        rel = root.relative_to(old)
    except ValueError:
        return artifact_uri
    return (new / rel).as_uri()
