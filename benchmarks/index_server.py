"""``index_query.py --server``: the index of an MLflow server on PostgreSQL next to the same runs in SQLite."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from countboard.index import build_index
from countboard.schema import load_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the generated store is a test fixture
from tests.fixtures.synthetic_store import local_store  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FAMILY = "counters"
#: What a sweep cell leaves: 7 files in the root and 3 folders (4 listings per run).
ARTIFACTS = {"config.yaml": 300, "samples.parquet": 4000, "failures.json": 2, "tables/errors.parquet": 2000,
             "tables/mosaic_pairs.parquet": 1500, "figures/mosaic_0.png": 9000, "checkpoints/part-00000.parquet": 3000}


def _runs(client, exp_id: str, n: int, keys: list[str], artifacts_of, seed: int = 0) -> list[str]:
    """``n`` finished counter runs, 8 writers at a time (a server serves them in parallel), each ended as a sweep
    cell ends: its artifacts written (into ``artifacts_of(run_id)``, the folder the store keeps them in), then its
    manifest recorded (``Tracker.set_status`` does it by listing the run's artifacts through the store)."""
    from mlflow.entities import Metric, Param

    from countboard.tracking import Tracker

    tracker = Tracker(client.tracking_uri)
    rng = np.random.default_rng(seed)
    values = rng.uniform(0, 1, (n, len(keys)))

    def one(i: int) -> str:
        tags = {"family": FAMILY, "model": f"model_{i % 50:02d}", "dataset": f"dataset_{i // 50 % 5}",
                "split": "split_0", "task": "praco", "model_kind": "counter", "config_hash": f"h{i}"}
        # runs of a sweep that ended 10 minutes ago: a quick update looks only at runs started or ended since the
        # last index (less 5 min for clock skew), as on a store that is not being written this minute
        start = int(time.time() * 1000) - 610_000
        run = client.create_run(exp_id, run_name=f"run-{i}", tags=tags, start_time=start)
        client.log_batch(run.info.run_id, metrics=[Metric(k, float(v), start, 0) for k, v in zip(keys, values[i],
                                                                                                 strict=True)],
                         params=[Param("seed", str(i))])
        _write_artifacts(artifacts_of(run.info.run_id))
        tracker.record_artifacts(run.info.run_id, start + 10_000)  # as Tracker.set_status does, with this end time
        client.set_terminated(run.info.run_id, end_time=start + 10_000)
        return run.info.run_id

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(n)))


def _write_artifacts(folder: Path) -> None:
    for rel, size in ARTIFACTS.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"\0" * size)


def _sqlite(root: Path, n: int, keys: list[str]) -> tuple[str, str]:
    from mlflow.tracking import MlflowClient

    uri, artifact_root = local_store(root)
    client = MlflowClient(uri)
    exp_id = client.create_experiment("bench", artifact_location=f"{artifact_root}/bench")
    _runs(client, exp_id, n, keys, lambda run_id: root / "artifacts" / "bench" / run_id / "artifacts")
    return uri, exp_id


def _server(n: int, keys: list[str]):
    """PostgreSQL + ``countboard server`` as the integration tests start them, filled with ``n`` runs; the
    artifact files are written into the server's artifact folder (the server lists them as it would uploads)."""
    sys.path.insert(0, str(REPO))
    from mlflow.tracking import MlflowClient
    from tests.integration import services

    pg = services.start_postgres()
    try:
        server = services.start_mlflow_server(pg.uri, dict(os.environ))
    except BaseException:
        pg.stop()
        raise
    client = MlflowClient(server.url)
    exp_id = client.create_experiment("bench")
    _runs(client, exp_id, n, keys, lambda run_id: server.artifacts / exp_id / run_id / "artifacts")
    return pg, server, exp_id


def _measure(uri: str, exp_id: str, db: Path, keys: list[str], n: int, change_store) -> dict[str, object]:
    """Full index (without and with manifests), then updates with nothing changed and after ``change_store``:
    the default (quick, a scan having just run) and ``--scan``, each on its own copy of the same index."""
    from unittest import mock

    from countboard.tracking import manifest

    with mock.patch.object(manifest, "decode", return_value=None):  # as if other tools had written every run
        out = {"full_listed": build_index(uri, db, full=True)}
    out["full"] = build_index(uri, db, full=True)
    out["same"] = build_index(uri, db)
    out["same_scan"] = build_index(uri, db, update="scan")
    change_store(uri, exp_id, keys, n)
    twin = db.with_name(f"twin-{db.name}")
    for suffix in ("", ".scanned"):
        shutil.copyfile(f"{db}{suffix}", f"{twin}{suffix}")
    out["changed"] = build_index(uri, db)
    out["changed_scan"] = build_index(uri, twin, update="scan")
    return out


def server_vs_sqlite(n: int, n_metrics: int, change_store) -> int:
    """Print the side-by-side table; exit status 0 when the server meets its targets."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    # as `countboard index` sets it before its first request (the HTTP session is made once per process)
    from countboard.index.source import LIST_WORKERS

    os.environ.setdefault("MLFLOW_HTTP_POOL_MAXSIZE", str(2 * LIST_WORKERS))
    keys = ([m.key for m in load_schema().family_metrics(FAMILY)] + [f"extra_{i:02d}" for i in range(n_metrics)])
    keys = keys[:n_metrics]
    work = Path(tempfile.mkdtemp(prefix="countboard-index-server-"))
    t = time.perf_counter()
    sqlite_uri, sqlite_exp = _sqlite(work / "sqlite", n, keys)
    t_sqlite = time.perf_counter() - t
    t = time.perf_counter()
    pg, server, server_exp = _server(n, keys)
    t_server = time.perf_counter() - t
    try:
        print(f"{n} runs x {len(keys)} metrics x {len(ARTIFACTS)} artifacts; prepared in {t_sqlite:.0f} s (SQLite), "
              f"{t_server:.0f} s (server, PostgreSQL start included)")
        local = _measure(sqlite_uri, sqlite_exp, work / "sqlite.duckdb", keys, n, change_store)
        remote = _measure(server.url, server_exp, work / "server.duckdb", keys, n, change_store)
    finally:
        server.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows = [("full index", "full", 10.0), ("full index, no manifests", "full_listed", None),
            ("update, nothing changed", "same", 2.0), ("update --scan, nothing changed", "same_scan", None),
            ("update after changes", "changed", 2.0), ("update --scan after changes", "changed_scan", None)]
    print(f"{'':<36}{'SQLite':>10}{'server':>10}{'ratio':>8}  target (server)  what the server index did")
    ok = True
    for name, key, target in rows:
        a, b = local[key], remote[key]
        ok &= (target is None or b.seconds <= target) and not b.warnings
        goal = "" if target is None else f"<= {target:>4.0f} s"
        print(f"{name:<36}{a.seconds:>9.2f}s{b.seconds:>9.2f}s{b.seconds / max(a.seconds, 1e-9):>7.1f}x"
              f"  {goal:<15}  {b.summary().split(' in ')[0]}"
              + (f"; {len(b.warnings)} warnings" if b.warnings else ""))
    edits = max(1, n // 100)
    for side in (local, remote):  # what each update must have seen (the default does not see late metric edits)
        c, cs = side["changed"], side["changed_scan"]
        ok &= (c.added, c.removed) == (10, 5) and (cs.added, cs.updated, cs.removed) == (10, edits, 5)
        ok &= side["full"].artifacts_listed == 0 and side["full_listed"].artifacts_listed == n
    print("targets met" if ok else "targets NOT met")
    return 0 if ok else 1
