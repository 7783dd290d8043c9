"""The index at a lab's scale: a full index of 30,000 runs × 100 metrics and the update after 10 new runs, side by
side with ``mlflow.search_runs`` reading the same store (the peer: what a script or the MLflow UI does instead).

The store is written by ``tests/fixtures/bulk_store.py`` (``--runs`` × ``--metrics``, 5 ranking families plus the
engine's metrics, 200 models, 10 datasets, 3 splits, 3 seeds) and kept in ``--workdir``. Timed, each as wall time
and as this process's CPU time (user + system, DuckDB's threads included: on a shared machine the wall time
mostly measures the other jobs, the CPU time what the work costs):

1. ``build_index(full=True)``;
2. 10 runs logged as a sweep logs them (``MlflowClient``), then ``build_index(update="quick")`` (what the default
   update does within ``SCAN_EVERY_S`` of the last scan);
3. ``build_index(update="quick")`` again, nothing having changed;
4. ``mlflow.search_runs`` over every run of the store (all pages, into a DataFrame).

The peak resident memory of the process after the full index is shown too (``ru_maxrss``: the most this process
held so far, so for a second size it is the larger of the two).

Targets (issue 25), on a 2-core machine: full index ≤ 60 s, the 10-run update ≤ 1 s.

``--store DIR`` reuses a store ``tests/fixtures/bulk_store.py`` wrote there (``--runs``/``--metrics`` as it was
written): the script never changes it, it copies its ``mlflow.db`` into ``--workdir`` (the artifacts stay where
they are, as a copied store reads them) before logging the 10 runs, and indexes the copy.

Usage: ``python benchmarks/index_scale.py [--runs 30000] [--metrics 100] [--workdir DIR] [--store DIR]
[--no-peer]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the store generator is a test fixture
from tests.fixtures.bulk_store import make_bulk_store  # noqa: E402

from countboard.index import build_index  # noqa: E402

FULL_TARGET_S, UPDATE_TARGET_S = 60.0, 1.0


def timed(fn):
    """(result, wall seconds, CPU seconds of this process)."""
    c0, t0 = os.times(), time.perf_counter()
    out = fn()
    c1 = os.times()
    return out, time.perf_counter() - t0, (c1.user - c0.user) + (c1.system - c0.system)


def add_runs(uri: str, n: int, metrics: list[str]) -> None:
    """``n`` finished runs, tagged and logged as the engine logs a cell."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("countboard")
    now = int(time.time() * 1000)
    for i in range(n):
        tags = {"family": "counters", "model": f"new_model_{i}", "dataset": "dataset_00", "task": "counters_task",
                "model_kind": "counter", "config_hash": f"new-{now}-{i}", "countboard.role": "cell"}
        run = client.create_run(exp.experiment_id, run_name=f"new_model_{i} · dataset_00", tags=tags)
        client.log_batch(run.info.run_id, metrics=[Metric(k, 0.5, now, 0) for k in metrics],
                         params=[Param("dataset.split", "test"), Param("seed", "0")], tags=[RunTag("device", "cpu")])
        client.set_terminated(run.info.run_id)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=30_000)
    p.add_argument("--metrics", type=int, default=100)
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "countboard-index-scale")
    p.add_argument("--store", type=Path, help="a bulk store written before (left unchanged: its mlflow.db is "
                   "copied into --workdir)")
    p.add_argument("--no-peer", action="store_true", help="skip mlflow.search_runs (minutes at 30,000 runs)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    store_dir = args.workdir / f"store_{args.runs}x{args.metrics}"
    if args.store is not None:
        if not (args.store / "mlflow.db").is_file():
            p.error(f"--store {args.store}: no mlflow.db there; write one with "
                    "`python -m tests.fixtures.bulk_store DIR --runs N --metrics M`")
        store_dir = args.workdir / f"copy_of_{args.store.name}"
        store_dir.mkdir(parents=True, exist_ok=True)
        for stale in store_dir.glob("*"):
            if stale.is_file() or stale.is_symlink():
                stale.unlink()
        shutil.copyfile(args.store / "mlflow.db", store_dir / "mlflow.db")
        # the copy's artifacts are the store's (a link), and the copy's runs name them in the copy's folder, as
        # the runs of a store that sweeps wrote in place do
        (store_dir / "artifacts").symlink_to((args.store / "artifacts").resolve(), target_is_directory=True)
        from countboard.tracking.relocate import rewrite_locations

        rewrite_locations(store_dir / "mlflow.db")
        from tests.fixtures.bulk_store import _families

        keys = [k for k, _ in _families(args.metrics)["counters"][2]]
    elif not (store_dir / "mlflow.db").exists():
        store, wall, cpu = timed(lambda: make_bulk_store(store_dir, args.runs, args.metrics, progress=True))
        print(f"store: {args.runs} runs x {args.metrics} metrics written in {wall:.0f} s ({cpu:.0f} s CPU)")
        keys = store.metric_keys["counters"]
    else:
        from tests.fixtures.bulk_store import _families

        keys = [k for k, _ in _families(args.metrics)["counters"][2]]
    uri = f"sqlite:///{store_dir / 'mlflow.db'}"
    db = store_dir / "index.duckdb"
    for stale in store_dir.glob("index.duckdb*"):  # a full build from nothing, as a first index is
        stale.unlink()
    rows = []
    load0 = os.getloadavg()[0]
    full, wall, cpu = timed(lambda: build_index(uri, db, full=True))
    rows.append(("full index", wall, cpu, FULL_TARGET_S, f"{full.runs} runs"))
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"full index: {wall:.1f} s wall, {cpu:.1f} s CPU (load {os.getloadavg()[0]:.1f}), peak RSS so far "
          f"{peak_gb:.2f} GB", flush=True)
    add_runs(uri, 10, keys)
    # what the default update does within SCAN_EVERY_S of the last scan (a full build that takes longer, as on a
    # loaded machine, makes the default a scan of every run)
    upd, wall, cpu = timed(lambda: build_index(uri, db, update="quick"))
    rows.append(("update after 10 new runs", wall, cpu, UPDATE_TARGET_S,
                 f"{upd.added} added, {upd.updated} updated ({upd.mode})"))
    print(f"update: {wall:.2f} s wall, {cpu:.2f} s CPU (load {os.getloadavg()[0]:.1f})", flush=True)
    same, wall, cpu = timed(lambda: build_index(uri, db, update="quick"))
    rows.append(("no-change update", wall, cpu, None,
                 f"{same.added} added, {same.updated} updated, written: {same.written} ({same.mode})"))
    print(f"no-change update: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    if not args.no_peer:
        import mlflow

        mlflow.set_tracking_uri(uri)
        exp_ids = [e.experiment_id for e in mlflow.search_experiments()]
        df, wall, cpu = timed(lambda: mlflow.search_runs(exp_ids, max_results=1_000_000))
        rows.append(("mlflow.search_runs, every run", wall, cpu, None, f"{len(df)} rows x {df.shape[1]} columns"))
    load1 = os.getloadavg()[0]
    print(f"\n{args.runs} runs x {args.metrics} metrics; load average {load0:.1f} before, {load1:.1f} after "
          f"(2 cores)")
    print(f"{'':<32}{'wall (s)':>10}{'CPU (s)':>10}{'target (s)':>12}  note")
    for name, w, c, target, note in rows:
        print(f"{name:<32}{w:10.2f}{c:10.2f}{(f'{target:.0f}' if target else '—'):>12}  {note}")
    print(f"peak resident memory after the full index: {peak_gb:.2f} GB")
    if not args.no_peer:
        print(f"search_runs / full index: {rows[3][1] / rows[0][1]:.1f}x wall, {rows[3][2] / rows[0][2]:.1f}x CPU")
    ok = rows[0][2] <= FULL_TARGET_S and rows[1][2] <= UPDATE_TARGET_S
    print("targets met (CPU time)" if ok else "targets NOT met (CPU time)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
