"""Index build and leaderboard query speed on a generated store, side by side with ``mlflow.search_runs``.

The store (SQLite + local artifacts) holds ``--runs`` counter runs (default 5,000) with ``--metrics`` metrics each
(default 30, the first declared metrics of the ``counters`` family), spread over 50 models, 5 datasets, 2 splits
and repeats. The script measures:

1. the full index build;
2. updates with nothing changed (the default, quick right after a scan, and ``--scan``), then after 1% of the
   runs changed (a metric logged into a finished run), 10 runs were added and 5 deleted: first the default (sees
   the added and deleted runs, not the late metric edits), then ``--scan`` (sees the edits);
3. the leaderboard's ranking question ("counters on dataset D, split S, latest run per model, best CntF1 first")
   answered by the leaderboard's own DuckDB query and by ``mlflow.search_runs`` + pandas, checking both give the
   same ranking, and printing the ratio of medians and the DuckDB p95.

Usage: ``python benchmarks/index_query.py [--runs 5000] [--workdir DIR] [--repeats 30]``. The store is kept in
``--workdir`` and reused when it already has the requested number of runs.

``--server`` instead indexes the same runs (default 1,000, each with 7 artifacts in 3 folders and an artifact
manifest, as a sweep cell ends) in a SQLite store and in an MLflow server on PostgreSQL with proxied artifacts
(started here as the integration tests start it; root or a PostgreSQL install needed), side by side: full index
(also with manifests ignored, as for runs other tools wrote), updates with nothing changed and after 1% of the runs
changed, 10 were added and 5 deleted (the default and ``--scan``). Targets for the server: full ≤ 10 s, the default
update ≤ 2 s. ``--quick`` shrinks either mode (500 runs, 5 repeats; 200 runs with
``--server``).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from countboard.index import build_index
from countboard.index.ddl import LATEST_COLUMN, VIEW_RUN_COLUMNS
from countboard.index.reader import connect_readonly, use_index
from countboard.paths import leaderboard_dir
from countboard.schema import load_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the generated store is a test fixture
from tests.fixtures.synthetic_store import local_store  # noqa: E402

sys.path.insert(0, str(leaderboard_dir()))
import queries  # noqa: E402  (the leaderboard's SQL)

FAMILY = "counters"
MODELS, DATASETS, SPLITS = 50, 5, 2


def metric_keys(n: int) -> list[str]:
    declared = [m.key for m in load_schema().family_metrics(FAMILY)]
    return (declared + [f"extra_{i:02d}" for i in range(max(0, n - len(declared)))])[:n]


def generate(store_dir: Path, n_runs: int, keys: list[str], seed: int = 0) -> tuple[str, str]:
    """Write ``n_runs`` finished counter runs with ``log_batch`` (one call per run)."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    uri, artifact_root = local_store(store_dir)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("bench")
    if exp is not None:
        n_have = len(client.search_runs([exp.experiment_id], max_results=n_runs + 1))
        if n_have >= n_runs:
            print(f"reusing {n_have} runs in {store_dir}")
            return uri, exp.experiment_id
        raise SystemExit(f"{store_dir} holds {n_have} runs, not {n_runs}; pass an empty --workdir")
    exp_id = client.create_experiment("bench", artifact_location=f"{artifact_root}/bench")
    rng = np.random.default_rng(seed)
    skill = rng.uniform(0.2, 0.9, MODELS)
    t0 = time.perf_counter()
    base = int(time.time() * 1000) - 3_600_000 - 10 * n_runs
    for i in range(n_runs):
        m, d, s = i % MODELS, (i // MODELS) % DATASETS, (i // (MODELS * DATASETS)) % SPLITS
        tags = {"family": FAMILY, "model": f"model_{m:02d}", "dataset": f"dataset_{d}", "split": f"split_{s}",
                "task": "praco", "model_kind": "counter", "config_hash": f"h{i}"}
        # runs of sweeps that ended an hour ago: an update looks only at runs started or ended since the last
        # index (less 5 min for clock skew), as on a store that is not being written this minute
        start = base + 10 * i
        run = client.create_run(exp_id, run_name=f"run-{i}", tags=tags, start_time=start)
        metrics = [Metric(k, float(np.clip(skill[m] + rng.normal(0, 0.05), 0, 1)), start, 0) for k in keys]
        client.log_batch(run.info.run_id, metrics=metrics, params=[Param("seed", str(i)), Param("batch_size", "8")],
                         tags=[RunTag("device", "cpu")])
        client.set_terminated(run.info.run_id, end_time=start + 1000)
        if (i + 1) % 500 == 0:
            print(f"  generated {i + 1}/{n_runs} runs ({time.perf_counter() - t0:.0f}s)", flush=True)
    return uri, exp_id


def change_store(uri: str, exp_id: str, keys: list[str], n_runs: int) -> None:
    """Move one metric of 1% of the runs, add 10 runs, delete 5."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([exp_id], max_results=n_runs, order_by=["attributes.start_time ASC"])
    now = int(time.time() * 1000)
    for r in runs[: max(1, n_runs // 100)]:
        client.log_batch(r.info.run_id, metrics=[Metric(keys[0], 0.5, now, 1)])
    for r in runs[-5:]:
        client.delete_run(r.info.run_id)
    for i in range(10):
        run = client.create_run(exp_id, tags={"family": FAMILY, "model": f"model_{i:02d}", "dataset": "dataset_0",
                                              "split": "split_0", "task": "praco"})
        client.log_batch(run.info.run_id, metrics=[Metric(k, 0.1, now, 0) for k in keys])
        client.set_terminated(run.info.run_id)


def duckdb_answer(con, sort: str, columns: list[str], dataset: str, split: str) -> pd.DataFrame:
    """The leaderboard's queries for one ranking, as ``leaderboard/data.ranking`` runs them uncached: does the
    view exist, its metric columns, how many tasks report the ranked metric, then the ranking itself."""
    cur = con.cursor()
    try:
        use_index(cur)
        cur.execute(queries.HAS_VIEW, [FAMILY]).fetchall()
        cols = [c for (c,) in cur.execute(queries.VIEW_COLUMNS, [FAMILY]).fetchall()
                if c not in VIEW_RUN_COLUMNS and c != LATEST_COLUMN]
        by_task = cur.execute(queries.tasks_reporting(FAMILY, sort)).fetchone()[0] > 1
        sql = queries.ranking(FAMILY, sort, True, latest_only=True, columns=columns, metric_keys=cols,
                              by_task=by_task)
        return cur.execute(sql, [dataset, dataset, split, split]).df()
    finally:
        cur.close()


def mlflow_answer(uri: str, exp_id: str, sort: str, dataset: str, split: str) -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs([exp_id], filter_string=(
        f"tags.family = '{FAMILY}' AND tags.dataset = '{dataset}' AND tags.split = '{split}' "
        "AND attributes.status = 'FINISHED'"), order_by=[f"metrics.{sort} DESC"], max_results=50000)
    df = df.sort_values("end_time", ascending=False).drop_duplicates(["tags.model", "tags.task"])
    return df.sort_values([f"metrics.{sort}", "tags.model"], ascending=[False, True])


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5000)
    p.add_argument("--metrics", type=int, default=30)
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "countboard-index-bench")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--server", action="store_true", help="SQLite vs an MLflow server on PostgreSQL, side by side")
    p.add_argument("--quick", action="store_true", help="a smaller store, fewer repeats")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.server:
        from index_server import server_vs_sqlite

        return server_vs_sqlite(args.runs if args.runs != 5000 else (200 if args.quick else 1000), args.metrics,
                                change_store)
    if args.quick:
        args.runs, args.repeats = min(args.runs, 500), 5
        args.workdir = args.workdir.with_name(args.workdir.name + "-quick")
    keys = metric_keys(args.metrics)
    sort = load_schema().families[FAMILY].main_metric
    store = args.workdir.resolve()
    t = time.perf_counter()
    uri, exp_id = generate(store, args.runs, keys)
    print(f"store: {args.runs} runs x {len(keys)} metrics ({time.perf_counter() - t:.0f}s to prepare)")
    db = store / "bench.duckdb"
    full = build_index(uri, db, full=True)
    same = build_index(uri, db)
    same_scan = build_index(uri, db, update="scan")
    change_store(uri, exp_id, keys, args.runs)
    quick = build_index(uri, db)
    incr = build_index(uri, db, update="scan")
    build_index(uri, db, full=True)  # leave a fresh index for the query timings
    dataset, split = "dataset_0", "split_0"
    t = time.perf_counter()
    con = connect_readonly(db)
    t_connect = time.perf_counter() - t
    columns = keys[:10]  # as many metric columns as the page shows by default
    ours = duckdb_answer(con, sort, columns, dataset, split)
    theirs = mlflow_answer(uri, exp_id, sort, dataset, split)
    assert list(ours.model) == list(theirs["tags.model"]), "DuckDB and MLflow rankings differ"
    t_duck = timed(lambda: duckdb_answer(con, sort, columns, dataset, split), args.repeats)
    t_mlflow = timed(lambda: mlflow_answer(uri, exp_id, sort, dataset, split), max(3, args.repeats // 6))
    p95 = float(np.percentile(t_duck, 95))
    ratio = statistics.median(t_mlflow) / statistics.median(t_duck)
    rows = [
        ("full index", f"{full.seconds:.1f} s", f"{full.runs} runs, {full.histories_fetched} metric histories"),
        ("update, nothing changed", f"{same.seconds:.2f} s", same.summary().split(":", 1)[0]),
        ("update --scan, nothing changed", f"{same_scan.seconds:.2f} s", same_scan.summary().split(":", 1)[0]),
        ("update after changes", f"{quick.seconds:.2f} s",
         f"{quick.added} added, {quick.updated} updated, {quick.removed} removed (late metric edits not seen)"),
        ("update --scan after changes (then)", f"{incr.seconds:.2f} s",
         f"{incr.added} added, {incr.updated} updated, {incr.removed} removed"),
        ("ranking query, DuckDB (median)", f"{statistics.median(t_duck) * 1000:.1f} ms",
         f"p95 {p95 * 1000:.1f} ms over {len(t_duck)} runs, {len(ours)} rows"),
        ("open the index (once per index version)", f"{t_connect * 1000:.1f} ms", "cached by the leaderboard"),
        ("ranking query, mlflow.search_runs (median)", f"{statistics.median(t_mlflow) * 1000:.0f} ms",
         f"over {len(t_mlflow)} runs"),
        ("speed-up (median ratio)", f"{ratio:.0f}x", "target >= 50x, DuckDB p95 <= 100 ms"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>10}  {note}")
    ok = ratio >= 50 and p95 <= 0.1
    print("targets met" if ok else "targets NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
