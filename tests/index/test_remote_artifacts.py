"""Artifacts read through the store: parallel listing, the local cache of remote artifacts, the UI link."""

from __future__ import annotations

from pathlib import Path

import pytest

from countboard.index import artifacts, source
from countboard.index.artifacts import ArtifactPathError, cache_path, fetch_artifact, is_local
from countboard.index.ui_address import DEFAULT_UI, store_ui


def _tree(root: Path, files: dict[str, bytes]) -> str:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root.as_uri()


def test_listing_of_many_runs_matches_one_by_one_and_reports_failures(tmp_path):
    runs = [(f"r{i}", _tree(tmp_path / f"r{i}", {"a.txt": b"x" * i, f"d/e{i}.bin": b"yy", "d/f/g.txt": b""}))
            for i in range(7)]
    broken = ("bad", "unknownscheme://nowhere/x")
    listings, errors = source.list_artifacts_of_runs([*runs, broken], None, workers=3)
    assert set(errors) == {"bad"} and set(listings) == {r for r, _ in runs}
    for run_id, uri in runs:
        assert listings[run_id] == source.list_artifacts(uri)
    i = 4
    assert listings["r4"] == [("a.txt", False, i), ("d", True, None), (f"d/e{i}.bin", False, 2),
                              ("d/f", True, None), ("d/f/g.txt", False, 0)]
    assert source.list_artifacts_of_runs([], None) == ({}, {})


class _Repo:
    """Stands in for a remote artifact repository and counts downloads."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.downloads = files, 0

    def download_artifacts(self, rel: str, dst: str) -> str:
        self.downloads += 1
        out = Path(dst) / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(self.files[rel])
        return str(out)


def test_remote_artifact_is_downloaded_once_and_again_when_its_size_changes(tmp_path, monkeypatch):
    repo = _Repo({"mosaic/m0.png": b"png-1"})
    seen = []
    monkeypatch.setattr(source, "artifact_repository", lambda uri, store: seen.append((uri, store)) or repo)
    uri, store = "mlflow-artifacts:/1/abc/artifacts", "http://127.0.0.1:5999"
    got = fetch_artifact(store, uri, "mosaic/m0.png", tmp_path / "cache", size=5)
    assert got.read_bytes() == b"png-1" and got == cache_path(tmp_path / "cache", uri, "mosaic/m0.png")
    assert seen == [(uri, store)]  # resolved against the given store, not the process-wide tracking URI
    assert fetch_artifact(store, uri, "mosaic/m0.png", tmp_path / "cache", size=5) == got
    assert repo.downloads == 1
    repo.files["mosaic/m0.png"] = b"png-two"
    assert fetch_artifact(store, uri, "mosaic/m0.png", tmp_path / "cache", size=7).read_bytes() == b"png-two"
    assert repo.downloads == 2
    other = fetch_artifact(store, "mlflow-artifacts:/1/xyz/artifacts", "mosaic/m0.png", tmp_path / "cache")
    assert other != got and repo.downloads == 3
    assert not [p for p in (tmp_path / "cache").rglob(".fetch-*")]  # no temporary folder left behind


def test_remote_paths_cannot_leave_the_cache(tmp_path):
    for bad in ("../x", "/etc/passwd", "a/../../b", "", "a\x00b"):
        with pytest.raises(ArtifactPathError):
            fetch_artifact("http://h", "mlflow-artifacts:/1/r/artifacts", bad, tmp_path)


def test_local_artifacts_are_read_in_place(tmp_path):
    uri = _tree(tmp_path / "run", {"tables/t.parquet": b"p"})
    assert is_local(uri) and is_local(str(tmp_path)) and not is_local("mlflow-artifacts:/1/r")
    assert not is_local("s3://b/k") and not is_local("file://otherhost/x")
    assert fetch_artifact("sqlite:///x.db", uri, "tables/t.parquet", tmp_path / "cache") == (
        tmp_path / "run" / "tables" / "t.parquet").resolve()
    assert not (tmp_path / "cache").exists()
    assert artifacts.resolve_artifact(uri, "tables/t.parquet").read_bytes() == b"p"


def test_an_http_store_is_its_own_ui():
    assert store_ui("http://10.1.2.3:5000/") == "http://10.1.2.3:5000"
    assert store_ui("https://mlflow.lab.org") == "https://mlflow.lab.org"
    assert store_ui("sqlite:////x/mlflow.db") == DEFAULT_UI
    assert store_ui("postgresql://u@h/db") == DEFAULT_UI
