"""A run's artifact manifest: written when it ends, read by the index in place of listing the artifacts."""

from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import OmegaConf

from countboard.index import build_index
from countboard.index.reader import connect_readonly
from countboard.tracking import manifest, tracker_from_config
from countboard.tracking import store as st


def _listing(files: dict[str, int]) -> list:
    """What a listing of ``files`` returns, folders included (written out independently of ``decode``)."""
    folders = set()
    for p in files:
        parts = p.split("/")[:-1]
        folders.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted([(p, False, s) for p, s in files.items()] + [(f, True, None) for f in folders])


def test_round_trip_with_folders_and_an_empty_listing():
    files = {"config.yaml": 3, "tables/errors.parquet": 10, "figures/a/b/c.png": 0, "x y.txt": 7}
    tags = manifest.encode(_listing(files), 2_000)
    assert set(tags) == {manifest.MANIFEST_TAG, manifest.PARTS_TAG} and tags[manifest.PARTS_TAG] == "1"
    assert json.loads(tags[manifest.MANIFEST_TAG])["files"][0] == ["config.yaml", 3]
    assert manifest.decode(tags, "FINISHED", 2_000) == _listing(files)
    assert ("figures/a/b", True, None) in manifest.decode(tags, "FINISHED", 2_000)
    assert manifest.decode(manifest.encode([], 5), "FAILED", 5) == []
    # folders with no file under them are kept too
    with_empty = [*_listing(files), ("empty", True, None), ("figures/none", True, None), ("x/y", True, None),
                  ("x", True, None)]
    assert manifest.decode(manifest.encode(with_empty, 7), "FINISHED", 7) == sorted(with_empty)


def test_long_manifest_is_cut_into_parts_that_fit_a_tag():
    files = {f"checkpoints/part-{i:05d}-{'f' * 64}.parquet": i for i in range(300)}
    tags = manifest.encode(_listing(files), 10)
    n = int(tags[manifest.PARTS_TAG])
    assert n > 3 and all(len(v) <= manifest.PART_CHARS for v in tags.values())
    assert manifest.decode(tags, "FINISHED", 10) == _listing(files)
    missing = {k: v for k, v in tags.items() if k != f"{manifest.MANIFEST_TAG}.2"}
    assert manifest.decode(missing, "FINISHED", 10) is None  # a part lost: list the run instead
    assert all(manifest.is_manifest_tag(k) for k in tags) and not manifest.is_manifest_tag("countboard.role")
    huge = {f"figures/{i:06d}-{'x' * 60}.png": i for i in range(5000)}  # too many files for one manifest
    assert manifest.encode(_listing(huge), 10) == manifest.NO_MANIFEST
    assert manifest.decode({**tags, **manifest.NO_MANIFEST}, "FINISHED", 10) is None


def test_manifest_is_not_trusted_for_running_reopened_or_unreadable_runs():
    tags = manifest.encode(_listing({"a.txt": 1}), 10_000_000)
    assert manifest.decode(tags, "FINISHED", 10_000_000) == [("a.txt", False, 1)]
    assert manifest.decode(tags, "RUNNING", None) is None
    assert manifest.decode(tags, "FINISHED", None) is None
    assert manifest.decode(tags, "FINISHED", 10_000_001) is None  # ended again since, by whatever tool
    assert manifest.decode(manifest.encode([], None), "FINISHED", 1) is None
    assert manifest.decode({}, "FINISHED", 1) is None
    assert manifest.decode({manifest.MANIFEST_TAG: "{not json"}, "FINISHED", 1) is None
    assert manifest.decode({manifest.MANIFEST_TAG: '{"v": 99, "end": 1, "files": []}'}, "FINISHED", 1) is None
    assert manifest.decode({manifest.MANIFEST_TAG: '[1, 2]'}, "FINISHED", 1) is None


def _tracker(tmp_path):
    return tracker_from_config(OmegaConf.create({"kind": "local", "store_dir": str(tmp_path / "mlruns")}))


def _log(tracker, run_id: str, tmp_path: Path, files: dict[str, bytes]) -> None:
    src = tmp_path / f"upload-{time.monotonic_ns()}"
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    tracker.log_dir(run_id, src)


def test_a_run_ended_through_the_tracker_is_indexed_without_listing(tmp_path):
    tracker = _tracker(tmp_path)
    exp = tracker.experiment_id("exp")
    ended = tracker.create_run(exp, "ended", {"family": "counters"})
    _log(tracker, ended, tmp_path, {"samples.parquet": b"abc", "tables/t.parquet": b"tt", "figures/m/0.png": b"p"})
    tracker.set_status(ended, st.FINISHED)
    tags = tracker.client.get_run(ended).data.tags
    repo = tracker.artifact_repository(tracker.client.get_run(ended).info.artifact_uri)
    assert manifest.decode(tags, "FINISHED", tracker.client.get_run(ended).info.end_time) == manifest.list_tree(repo)

    other = tracker.create_run(exp, "other tool", {"family": "counters"})  # ended without a manifest
    _log(tracker, other, tmp_path, {"b.txt": b"1234"})
    tracker.client.set_terminated(other)

    db = tmp_path / "index.duckdb"
    stats = build_index(tracker.uri, db)
    assert stats.artifacts_listed == 1  # only the run without a manifest
    con = connect_readonly(db)
    rows = lambda run: con.execute(  # noqa: E731
        "SELECT path, is_dir, file_size FROM artifacts WHERE run_id = ? ORDER BY path", [run]).fetchall()
    assert rows(ended) == [("figures", True, None), ("figures/m", True, None), ("figures/m/0.png", False, 1),
                           ("samples.parquet", False, 3), ("tables", True, None), ("tables/t.parquet", False, 2)]
    assert rows(other) == [("b.txt", False, 4)]
    assert not con.execute("SELECT count(*) FROM tags WHERE starts_with(key, 'countboard.artifacts')").fetchone()[0]
    con.close()

    # a file added to the ended run: its manifest is refreshed (the change the index notices) and, the run having
    # changed after it ended, the index lists it rather than trust any manifest
    _log(tracker, ended, tmp_path, {"annotations/task_1_m.csv": b"a,b\n"})
    tracker.record_artifacts(ended)
    stats = build_index(tracker.uri, db)
    assert stats.updated == 1 and stats.artifacts_listed == 1
    con = connect_readonly(db)
    assert ("annotations/task_1_m.csv", False, 4) in rows(ended)
    con.close()


def test_a_run_ends_even_when_its_manifest_cannot_be_written(tmp_path, monkeypatch, caplog):
    tracker = _tracker(tmp_path)
    run = tracker.create_run(tracker.experiment_id("exp"), "r", {})

    def unreachable(run_id):
        raise OSError("artifact store unreachable")

    monkeypatch.setattr(tracker, "record_artifacts", unreachable)
    tracker.set_status(run, st.FAILED)
    assert tracker.get_status(run) == st.FAILED
    assert "artifact manifest not recorded" in caplog.text
    assert manifest.MANIFEST_TAG not in tracker.client.get_run(run).data.tags


def test_a_reopened_run_is_listed_even_if_ending_it_again_fails_to_record_a_manifest(tmp_path, monkeypatch):
    tracker = _tracker(tmp_path)
    run = tracker.create_run(tracker.experiment_id("exp"), "r", {})
    _log(tracker, run, tmp_path, {"a.txt": b"1"})
    tracker.set_status(run, st.FAILED)  # a manifest naming a.txt
    tracker.set_status(run, st.RUNNING)  # resumed
    _log(tracker, run, tmp_path, {"b.txt": b"22"})
    monkeypatch.setattr(tracker, "record_artifacts", lambda run_id: (_ for _ in ()).throw(OSError("down")))
    tracker.set_status(run, st.FINISHED)
    info = tracker.client.get_run(run)
    assert manifest.decode(info.data.tags, info.info.status, info.info.end_time) is None  # the old one is void
    db = tmp_path / "index.duckdb"
    assert build_index(tracker.uri, db).artifacts_listed == 1
    con = connect_readonly(db)
    assert con.execute("SELECT path FROM artifacts WHERE run_id = ? ORDER BY path", [run]).fetchall() == [
        ("a.txt",), ("b.txt",)]
    con.close()


def test_a_run_whose_artifacts_could_not_be_listed_is_retried_by_the_next_quick_update(tmp_path, monkeypatch):
    from countboard.index import source

    tracker = _tracker(tmp_path)
    long_ago = int(time.time() * 1000) - 3_600_000
    run = tracker.client.create_run(tracker.experiment_id("exp"), start_time=long_ago).info.run_id
    _log(tracker, run, tmp_path, {"a.txt": b"1"})
    tracker.client.set_terminated(run, end_time=long_ago + 1000)  # no manifest: the index lists it
    real = source.list_artifacts

    def unreachable(uri, store=None):
        raise OSError("artifact store unreachable")

    monkeypatch.setattr(source, "list_artifacts", unreachable)
    db = tmp_path / "index.duckdb"
    first = build_index(tracker.uri, db)
    assert len(first.warnings) == 1 and "unreachable" in first.warnings[0]
    monkeypatch.setattr(source, "list_artifacts", real)
    again = build_index(tracker.uri, db)
    assert (again.mode, again.updated, again.artifacts_listed, again.warnings) == ("quick", 1, 1, [])
    con = connect_readonly(db)
    assert con.execute("SELECT path FROM artifacts WHERE run_id = ?", [run]).fetchall() == [("a.txt",)]
    con.close()


def test_files_other_tools_add_after_the_end_are_never_hidden_by_a_manifest(tmp_path):
    tracker = _tracker(tmp_path)
    exp = tracker.experiment_id("exp")
    reopened, edited = (tracker.create_run(exp, name, {}) for name in ("reopened", "edited"))
    for run in (reopened, edited):
        _log(tracker, run, tmp_path, {"a.txt": b"1"})
        tracker.set_status(run, st.FINISHED)
    db = tmp_path / "index.duckdb"
    assert build_index(tracker.uri, db).artifacts_listed == 0
    time.sleep(0.01)
    # another tool reopens a run, logs a file and ends it again: its end time moved, so the manifest is void
    tracker.client.update_run(reopened, status="RUNNING")
    _log(tracker, reopened, tmp_path, {"late.png": b"xx"})
    tracker.client.set_terminated(reopened)
    # another tool logs into an ended run without reopening it; a tag set later makes the run change
    _log(tracker, edited, tmp_path, {"posthoc.csv": b"abc"})
    tracker.client.set_tag(edited, "note", "checked")
    stats = build_index(tracker.uri, db, update="scan")
    assert (stats.updated, stats.artifacts_listed) == (2, 2)
    con = connect_readonly(db)
    paths = lambda run: [p for (p,) in con.execute(  # noqa: E731
        "SELECT path FROM artifacts WHERE run_id = ? ORDER BY path", [run]).fetchall()]
    assert paths(reopened) == ["a.txt", "late.png"] and paths(edited) == ["a.txt", "posthoc.csv"]
    con.close()
    # a rebuild trusts the manifests of unchanged runs; --list-artifacts lists every run
    full = build_index(tracker.uri, db, full=True)
    assert full.artifacts_listed == 1  # `reopened` (ended again); `edited` still has its end time
    assert build_index(tracker.uri, db, full=True, list_artifacts=True).artifacts_listed == 2
    con = connect_readonly(db)
    assert paths(edited) == ["a.txt", "posthoc.csv"]
    con.close()
