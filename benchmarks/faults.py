"""Faults injected on purpose, with real processes and real signals; writes the table of ``docs/reliability.md``.

Each fault is tried ``--trials`` times on the toy cell of the tests (12 units, ``checkpoint_every=4``) in a fresh
store. A trial *survived* when the next ordinary command works and the cell ends FINISHED with every unit.
*Units recomputed* counts units computed more than once over the trial; *units lost* counts units missing from the
final ``samples.parquet`` (must be 0).

    python benchmarks/faults.py            # 5 trials per fault (about 15 min on 2 busy cores)
    python benchmarks/faults.py --quick    # 1-3 trials per fault (a few minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import FIXTURES, store_runs, sweep_env  # noqa: E402
from tests.fixtures.socket_server import socket_server  # noqa: E402

TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config", "progress=false"]
UNITS = [f"u{i:03d}" for i in range(12)]


@dataclass
class Outcome:
    survived: bool
    recomputed: int = 0
    lost: int = 0
    note: str = ""
    outside: int = 0  # bytes written outside the store the commands were given
    seconds: float | None = None  # from the command's start to its error (store faults that must fail fast)


@dataclass
class Row:
    fault: str
    outcomes: list[Outcome] = field(default_factory=list)

    def cells(self) -> list[str]:
        n = len(self.outcomes)
        return [self.fault, str(n), f"{sum(o.survived for o in self.outcomes)}/{n}",
                str(sum(o.recomputed for o in self.outcomes)), str(sum(o.lost for o in self.outcomes))]


def _sweep(tmp: Path, args: list[str], store: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *TOY, *args,
           f"tracking.store_dir={store or tmp / 'mlruns'}"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=sweep_env(tmp, **env), timeout=600)


def _cells(tmp: Path, store: Path | None = None):
    runs = store_runs(store or tmp / "mlruns")
    return runs[runs["tags.countboard.role"] == "cell"]


def _cell_outcome(tmp: Path, calls: Counter, expected_cells: int = 1, store: Path | None = None) -> Outcome:
    import pandas as pd

    store = store or tmp / "mlruns"
    cells = _cells(tmp, store)
    ok = len(cells) == expected_cells and set(cells["status"]) == {"FINISHED"}
    lost = 0
    for run_id in cells["run_id"]:
        art = next(store.glob(f"artifacts/*/{run_id}/artifacts"), None)
        have = set(pd.read_parquet(art / "samples.parquet")["unit_id"]) if art and (
            art / "samples.parquet").exists() else set()
        lost += len(set(UNITS) - have)
    return Outcome(ok and lost == 0, sum(v - 1 for v in calls.values()), lost)


def _calls(path: Path) -> Counter:
    return Counter(path.read_text().split()) if path.exists() else Counter()


def kill_in_cell(point: str) -> Callable[[Path, random.Random], Outcome]:
    def trial(tmp: Path, rng: random.Random) -> Outcome:
        calls = tmp / "calls.log"
        args = [f"task.calls_log={calls}", "checkpoint_every=4"]
        first = _sweep(tmp, args, COUNTBOARD_FAILPOINT=point)
        if first.returncode != -9:
            return Outcome(False, note=f"first attempt exited {first.returncode}")
        if _sweep(tmp, args).returncode != 0:
            return Outcome(False, note="rerun failed")
        return _cell_outcome(tmp, _calls(calls))
    return trial


def truncated_part(tmp: Path, rng: random.Random) -> Outcome:
    calls = tmp / "calls.log"
    args = [f"task.calls_log={calls}", "checkpoint_every=4", "task.kill_at=u008"]
    if _sweep(tmp, args).returncode != -9:
        return Outcome(False, note="no kill")
    parts = sorted((tmp / "mlruns").glob("artifacts/*/*/artifacts/checkpoints/part-*.parquet"))
    victim = parts[rng.randrange(len(parts))]
    data = victim.read_bytes()
    victim.write_bytes(data[: rng.randrange(1, len(data))])
    if _sweep(tmp, args).returncode != 0:
        return Outcome(False, note="rerun failed")
    return _cell_outcome(tmp, _calls(calls))


def store_creation(tmp: Path, rng: random.Random) -> Outcome:
    code = "import sys; from countboard.tracking.local_store import ensure_local_store as e; e(sys.argv[1])"
    env = sweep_env(tmp, XDG_CACHE_HOME=str(tmp / "cache"))  # no store template: the kill meets the schema build
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp / "mlruns")], env=env)
    deadline = time.monotonic() + 120
    while not list((tmp / "mlruns").glob("mlflow.db*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # wait for the schema build to start (imports take seconds on a busy machine)
    time.sleep(rng.uniform(0.0, 2.0))  # the build takes about 1-3 s: the kill lands in it or just after it
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    mid = bool(list((tmp / "mlruns").glob("mlflow.db.creating-*")))
    calls = tmp / "calls.log"
    if _sweep(tmp, [f"task.calls_log={calls}"]).returncode != 0:
        return Outcome(False, note="sweep after the kill failed")
    out = _cell_outcome(tmp, _calls(calls))
    out.note = "killed mid-creation" if mid else "killed before or after creation"
    return out


def index_build(tmp: Path, rng: random.Random) -> Outcome:
    from countboard.index import build_index

    calls = tmp / "calls.log"
    if _sweep(tmp, [f"task.calls_log={calls}"]).returncode != 0:
        return Outcome(False, note="sweep failed")
    uri, db = f"sqlite:///{tmp / 'mlruns' / 'mlflow.db'}", tmp / "index.duckdb"
    code = f"from countboard.index import build_index; build_index({uri!r}, {str(db)!r})"
    env = {**sweep_env(tmp), "COUNTBOARD_FAILPOINT": "index_build"}
    if subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode != -9:
        return Outcome(False, note="no kill")
    stats = build_index(uri, db)
    clean = not list(tmp.glob("index.duckdb.tmp-*"))
    out = _cell_outcome(tmp, _calls(calls))
    return Outcome(out.survived and clean and stats.runs >= 1, out.recomputed, out.lost)


def concurrent_sweeps(tmp: Path, rng: random.Random) -> Outcome:
    args = ["model=toy,toy_double", "task=toy,toy_b", "task.delay_s=0.1", "checkpoint_every=4"]
    cmd = [sys.executable, "-m", "countboard.commands.sweep", "--multirun", *TOY, *args, f"tracking.store_dir={tmp / 'mlruns'}"]
    env = sweep_env(tmp, TOY_CELL_LOG_DIR=str(tmp))
    procs = [subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(2)]
    if any(p.wait(timeout=600) != 0 for p in procs):
        return Outcome(False, note="a sweep failed")
    counts: Counter = Counter()
    for log in tmp.glob("calls-*.log"):
        counts.update(f"{log.stem}/{u}" for u in log.read_text().split())
    cells = _cells(tmp)
    ok = len(cells) == 4 and set(cells["status"]) == {"FINISHED"}
    lost = 4 * len(UNITS) - len(counts)
    return Outcome(ok and lost == 0, sum(v - 1 for v in counts.values()), lost)


# ---- store faults: what users do to a folder of results (copy, move, read-only mount, damage, a down server)

#: Folders of a trial that are not a store: the sweeps' Hydra logs and the toy dataset's cache.
NOT_STORE = ("outputs", "data")


def _files(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file() and not p.name.endswith("-shm") and not str(p.relative_to(root)).startswith(skip)}


def _written(before: dict, after: dict) -> int:
    """Bytes of files created or changed between two ``_files`` listings."""
    return sum(size for name, (size, mtime) in after.items() if before.get(name) != (size, mtime))


def _countboard(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "countboard.cli", *args], capture_output=True, text=True, cwd=tmp,
                          env=sweep_env(tmp, XDG_CACHE_HOME=str(tmp / "cache")), timeout=600)
    return proc, time.perf_counter() - t0


def _one_line(proc: subprocess.CompletedProcess, *words: str) -> bool:
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    return proc.returncode != 0 and len(errors) == 1 and all(w in errors[0] for w in words) and (
        "Traceback" not in proc.stderr)


def copied_store(tmp: Path, rng: random.Random) -> Outcome:
    """``cp -r store copy``, sweep into the copy: not a byte of the original changes; the copy has both cells."""
    calls = tmp / "calls.log"
    if _sweep(tmp, [f"task.calls_log={calls}"], tmp / "store").returncode != 0:
        return Outcome(False, note="first sweep failed")
    subprocess.run(["cp", "-r", str(tmp / "store"), str(tmp / "copy")], check=True)
    before = _files(tmp, NOT_STORE + ("copy",))
    if _sweep(tmp, [f"task.calls_log={calls}", "seed=1"], tmp / "copy").returncode != 0:
        return Outcome(False, note="sweep into the copy failed")
    doctor, _ = _countboard(tmp, "doctor", "--store", str(tmp / "copy"))
    out = _cell_outcome(tmp, Counter(), expected_cells=2, store=tmp / "copy")
    out.outside = _written(before, _files(tmp, NOT_STORE + ("copy", "calls.log")))
    out.survived = out.survived and out.outside == 0 and doctor.returncode == 0
    return out


def moved_store(tmp: Path, rng: random.Random) -> Outcome:
    """A store made elsewhere (another machine's path), renamed here: sweep, index and doctor work in place."""
    calls = tmp / "calls.log"
    if _sweep(tmp, [f"task.calls_log={calls}"], tmp / "store").returncode != 0:
        return Outcome(False, note="first sweep failed")
    (tmp / "store").rename(tmp / "moved store")
    store = tmp / "moved store"
    before = _files(tmp, NOT_STORE + ("moved store",))
    if _sweep(tmp, [f"task.calls_log={calls}", "seed=1"], store).returncode != 0:
        return Outcome(False, note="sweep into the moved store failed")
    index, _ = _countboard(tmp, "index", "--store", str(store))  # after the sweep: doctor finds the index current
    doctor, _ = _countboard(tmp, "doctor", "--store", str(store))
    out = _cell_outcome(tmp, Counter(), expected_cells=2, store=store)
    out.outside = _written(before, _files(tmp, NOT_STORE + ("moved store", "calls.log")))
    out.survived = out.survived and out.outside == 0 and index.returncode == 0 and doctor.returncode == 0
    if not out.survived:
        out.note = (index.stderr + doctor.stdout + doctor.stderr)[-200:].replace("|", "/").replace("\n", " ")
    return out


def read_only_store(tmp: Path, rng: random.Random) -> Outcome:
    """A read-only bind mount of a store: index (to the user cache and to --db elsewhere) and doctor read it."""
    if _sweep(tmp, [], tmp / "store").returncode != 0:
        return Outcome(False, note="first sweep failed")
    ro = tmp / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(tmp / "store"), str(ro)], capture_output=True).returncode == 0
    if not mounted or subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode:
        if mounted:
            subprocess.run(["umount", str(ro)], check=False)
        return Outcome(False, note="no read-only bind mount here (needs root)")
    try:
        before = _files(tmp / "store")
        cached, _ = _countboard(tmp, "index", "--store", str(ro))
        elsewhere, _ = _countboard(tmp, "index", "--store", str(ro), "--db", str(tmp / "elsewhere.duckdb"))
        doctor, _ = _countboard(tmp, "doctor", "--store", str(ro))
        outside = _written(before, _files(tmp / "store"))
        indexed = list((tmp / "cache").rglob("index.duckdb")) and (tmp / "elsewhere.duckdb").is_file()
        ok = cached.returncode == 0 and elsewhere.returncode == 0 and doctor.returncode == 0 and bool(indexed)
        return Outcome(ok and outside == 0, outside=outside, note="" if ok else (cached.stderr + doctor.stderr)[-300:])
    finally:
        subprocess.run(["umount", str(ro)], check=False)


def _damage(kind: str) -> Callable[[Path, random.Random], Outcome]:
    """Damage ``mlflow.db`` (garbled b-tree pages of a random table, the file cut short, or a foreign file in its
    place); the sweep must refuse with one line, ``doctor --fix`` recover, and the next sweep finish the cell."""
    def trial(tmp: Path, rng: random.Random) -> Outcome:
        import sqlite3

        calls = tmp / "calls.log"
        args = [f"task.calls_log={calls}"]
        if _sweep(tmp, args).returncode != 0:
            return Outcome(False, note="first sweep failed")
        db = tmp / "mlruns" / "mlflow.db"
        with sqlite3.connect(db) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            table = rng.choice(["runs", "tags", "params", "metrics", "latest_metrics"])
            pages = [p for (p,) in con.execute("SELECT pageno FROM dbstat WHERE name = ?", (table,))]
        note = ""
        if kind == "garbled":
            with open(db, "r+b") as fh:
                for page in pages:
                    fh.seek((page - 1) * 4096)
                    fh.write(bytes(rng.randrange(256) for _ in range(64)))
            note = f"{table}: {len(pages)} page(s)"
        elif kind == "truncated":
            keep = rng.uniform(0.3, 0.9)
            db.write_bytes(db.read_bytes()[: int(db.stat().st_size * keep)])
            note = f"kept {keep:.0%}"
        else:
            db.write_bytes(b"name,count\ncats,3\n" * rng.randrange(1, 100))
        damaged = db.read_bytes()
        before = _files(tmp / "mlruns")
        t0 = time.perf_counter()
        refused = _sweep(tmp, args)
        seconds = time.perf_counter() - t0
        named = _one_line(refused, "not an MLflow store" if kind == "foreign" else "damaged")
        untouched = db.read_bytes() == damaged and _written(before, _files(tmp / "mlruns")) == 0
        if kind == "foreign":
            return Outcome(named and untouched, seconds=seconds, note="refused, file unchanged" if named else
                           refused.stderr[-300:])
        fix, _ = _countboard(tmp, "doctor", "--store", str(tmp / "mlruns"), "--fix")
        kept = [p for p in (tmp / "mlruns").glob("mlflow.db.damaged-*") if p.read_bytes() == damaged]
        if _sweep(tmp, args).returncode != 0:
            return Outcome(False, seconds=seconds, note=f"sweep after doctor --fix failed ({note})")
        out = _cell_outcome(tmp, _calls(calls))
        out.survived = out.survived and named and untouched and bool(kept) and "recovered" in fix.stdout
        out.seconds, out.note = seconds, note
        return out
    return trial


UNREACHABLE_COMMANDS = (["index"], ["leaderboard"], ["doctor"], ["compare"], ["mlflow-ui"])


def _unreachable(tmp: Path, uri: str, words: str) -> Outcome:
    """Every command and a sweep on the store ``uri``: one whole line containing ``words``; seconds = the slowest
    command's wall time, start-up included (the note gives `countboard --help`'s, measured beside them)."""
    before = _files(tmp)
    slowest, startup, ok = 0.0, 0.0, True
    for args in UNREACHABLE_COMMANDS:
        _, help_s = _countboard(tmp, "--help")
        startup = max(startup, help_s)
        proc, seconds = _countboard(tmp, *args, "--store", uri)
        ok = ok and _one_line(proc, words, "check")
        slowest = max(slowest, seconds)
    t0 = time.perf_counter()
    sweep = subprocess.run([sys.executable, "-m", "countboard.commands.sweep", *TOY, "tracking=server",
                            f"tracking.uri={uri}"], capture_output=True, text=True, cwd=tmp,
                           env=sweep_env(tmp, XDG_CACHE_HOME=str(tmp / "cache")), timeout=600)
    slowest = max(slowest, time.perf_counter() - t0)
    ok = ok and _one_line(sweep, words, "check")
    outside = _written(before, _files(tmp))
    return Outcome(ok and slowest <= 10 and not outside, outside=outside, seconds=slowest,
                   note=f"start-up of `countboard --help` {startup:.1f} s")


def down_server(tmp: Path, rng: random.Random) -> Outcome:
    """A refused connection (nothing listens on port 1)."""
    return _unreachable(tmp, "http://127.0.0.1:1", "cannot reach the MLflow server at http://127.0.0.1:1")


def silent_server(tmp: Path, rng: random.Random) -> Outcome:
    """A server that accepts the connection and never answers (the probe's timeout)."""
    with socket_server() as where:
        return _unreachable(tmp, f"http://{where}", f"cannot reach the MLflow server at http://{where}")


def postgres_closed_port(tmp: Path, rng: random.Random) -> Outcome:
    """A PostgreSQL store whose port is closed (MLflow's engine retried for minutes before)."""
    return _unreachable(tmp, "postgresql://u:p@127.0.0.1:1/db",
                        "cannot reach the database server of the MLflow store postgresql://u:***@127.0.0.1:1/db")


def bad_nested_key(tmp: Path, rng: random.Random) -> Outcome:
    """``+model.bogus=1`` and a wrongly typed task key: one line listing the valid keys, no store created."""
    t0 = time.perf_counter()
    bogus = _sweep(tmp, ["+model.bogus=1"])
    typed = _sweep(tmp, ["task.delay_s=slow"])
    seconds = time.perf_counter() - t0
    ok = _one_line(bogus, "model.bogus is not a key of model", "valid keys: ") and _one_line(typed, "task.delay_s")
    outside = sum(p.stat().st_size for p in (tmp / "mlruns").rglob("*") if p.is_file()) if (
        tmp / "mlruns").exists() else 0
    return Outcome(ok and not (tmp / "mlruns").exists(), outside=outside, seconds=seconds / 2)


# ---- model outputs, misfits and typed paths (what a model or a command line does to a cell)

def nonfinite_counts(tmp: Path, rng: random.Random) -> Outcome:
    """A counter returning NaN or +inf for some images in praco_negative: those units fail with the reason, no
    metric is logged non-finite; the next run with the counter fixed computes exactly them."""
    import math

    import pandas as pd

    args = ["model=nonfinite_counter", "dataset=synthetic_shapes", "task=praco_negative",
            "dataset.images_per_class={train:0,val:0,test:2}", "dataset.multi_class_images=0"]
    before = _files(tmp, NOT_STORE)
    if _sweep(tmp, args).returncode != 0:
        return Outcome(False, note="the sweep with NaN counts failed")
    run = _cells(tmp).iloc[0]
    metrics = {k: v for k, v in run.items() if k.startswith("metrics.") and v == v}
    finite = all(math.isfinite(v) and abs(v) < 1e300 for v in metrics.values())
    art = next((tmp / "mlruns").glob(f"artifacts/*/{run.run_id}/artifacts"))
    failed = {f["unit_id"] for f in json.loads((art / "failures.json").read_text())}
    units = failed | set(pd.read_parquet(art / "samples.parquet")["unit_id"])
    if _sweep(tmp, args, TOY_FINITE="1").returncode != 0:
        return Outcome(False, note="the rerun failed")
    cells = _cells(tmp)
    final = set(pd.read_parquet(art / "samples.parquet")["unit_id"])
    ok = (len(cells) == 1 and cells.iloc[0]["status"] == "FINISHED" and finite and len(failed) > 0
          and cells.iloc[0]["metrics.n_failed_samples"] == 0)
    outside = _written(before, _files(tmp, NOT_STORE + ("mlruns",)))
    return Outcome(ok and outside == 0 and not units - final, lost=len(units - final), outside=outside,
                   note=f"{len(failed)} of {len(units)} units failed, then recomputed")


def misfit_cells(tmp: Path, rng: random.Random) -> Outcome:
    """``model=sd15 task=praco_negative`` alone (one line, no store touched), in a multirun none of whose cells fits
    (one line, no store, no parent run), then in a multirun beside a cell that fits (which runs)."""
    t0 = time.perf_counter()
    alone = _sweep(tmp, ["model=sd15", "task=praco_negative"])
    seconds = time.perf_counter() - t0
    ok = _one_line(alone, "task=praco_negative takes a counter; model=sd15 is a text-to-image generator")
    none_fit = _sweep(tmp, ["hydra.mode=MULTIRUN", "model=sd15,procedural_good", "task=praco_negative"])
    ok = ok and none_fit.returncode == 2 and _one_line(none_fit, "none of the 2 cells of this sweep fits")
    made = (tmp / "mlruns").exists() and not _cells(tmp).empty
    multi = _sweep(tmp, ["hydra.mode=MULTIRUN", "model=oracle,sd15", "task=classic", "dataset=synthetic_shapes",
                         "dataset.images_per_class={train:0,val:0,test:1}", "dataset.multi_class_images=0"])
    errors = [line for line in multi.stderr.splitlines() if line.startswith("error:")]
    cells = _cells(tmp)
    ok = ok and not made and len(errors) == 1 and "model=sd15" in errors[0] and list(cells["tags.model"]) == ["oracle"]
    lost = 0
    if len(cells) == 1:  # the cell that fits ran whole: every unit of the run is in its samples
        import pandas as pd

        art = next((tmp / "mlruns").glob(f"artifacts/*/{cells.iloc[0].run_id}/artifacts"))
        lost = int(cells.iloc[0]["tags.n_units"]) - len(pd.read_parquet(art / "samples.parquet"))
    ok = ok and cells.iloc[0]["status"] == "FINISHED" and lost == 0 if len(cells) == 1 else False
    return Outcome(ok, lost=lost, seconds=seconds, note="" if ok else "misfit not refused in one line")


def typed_paths(tmp: Path, rng: random.Random) -> Outcome:
    """A store path with spaces, non-ASCII letters and ``=`` typed unquoted: swept, indexed and checked in it."""
    store = tmp / "jeu de données ✓" / "a=b c"
    before = _files(tmp, NOT_STORE)
    sweep = _sweep(tmp, [], store)
    index, _ = _countboard(tmp, "index", "--store", str(store))
    doctor, _ = _countboard(tmp, "doctor", "--store", str(store))
    out = _cell_outcome(tmp, Counter(), store=store)
    out.outside = _written(before, _files(tmp, NOT_STORE + ("jeu de données ✓", "cache")))
    out.survived = out.survived and out.outside == 0 and sweep.returncode == index.returncode == doctor.returncode == 0
    bad = _sweep(tmp, ["task.label=[a"], store)
    out.survived = out.survived and _one_line(bad, "`task.label=[a`: not an override Hydra can parse",
                                              "quote the value: 'task.label=\"[a\"'")
    return out


OUTPUT_FAULTS: dict[str, tuple[str, Callable]] = {
    "nonfinite_counts": ("a counter returning NaN or inf for some images (praco_negative), then fixed",
                         nonfinite_counts),
    "misfit_cells": ("a model the task does not take (model=sd15 task=praco_negative), alone, in a multirun of misfits "
                     "only and beside a cell that fits",
                     misfit_cells),
    "typed_paths": ("a store path with spaces, non-ASCII letters and = typed unquoted (sweep, index, doctor)",
                    typed_paths),
}


STORE_FAULTS: dict[str, tuple[str, Callable]] = {
    "copied_store": ("store copied (cp -r), then swept into the copy", copied_store),
    "moved_store": ("store renamed (path with a space), then swept, indexed, checked", moved_store),
    "read_only_store": ("store on a read-only bind mount: index (cache, --db), doctor", read_only_store),
    "garbled_pages": ("garbled b-tree pages of one table in mlflow.db", _damage("garbled")),
    "truncated_db": ("mlflow.db cut short at a random byte", _damage("truncated")),
    "foreign_db": ("a foreign file (CSV) as mlflow.db", _damage("foreign")),
    "down_server": ("server down: connection refused (index, leaderboard, doctor, compare, mlflow-ui, sweep)",
                    down_server),
    "silent_server": ("server that accepts and never answers (the same six commands)", silent_server),
    "postgres_closed_port": ("PostgreSQL store on a closed port (the same six commands)", postgres_closed_port),
    "bad_nested_key": ("bad nested model/task key (+model.bogus=1, task.delay_s=slow)", bad_nested_key),
}
STORE_FAULTS.update(OUTPUT_FAULTS)  # in the store table: units lost, bytes written outside


FAULTS: dict[str, tuple[str, Callable]] = {
    "store_creation": ("kill -9 during store creation", store_creation),
    "checkpoint_write": ("kill -9 during a checkpoint write", kill_in_cell("checkpoint_write")),
    "log_params": ("kill -9 between run creation and log_params", kill_in_cell("log_params")),
    "index_build": ("kill -9 during an index build", index_build),
    "truncated_part": ("checkpoint part truncated at a random byte", truncated_part),
    "concurrent_sweeps": ("two concurrent sweeps of one 2x2 grid", concurrent_sweeps),
}


# ---- a full or read-only file system, a repair killed at each step, a damaged artifact ----------------------------

def _tmpfs(folder: Path, size: str = "8m") -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


def _umount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def full_store(tmp: Path, rng: random.Random) -> Outcome:
    """The store on a tmpfs with 16-96 KB left: a two-cell multirun ends with one line per job naming the store's
    file system and writes nothing elsewhere; with the space freed, the same command finishes both cells."""
    mnt = tmp / "mnt"
    if not _tmpfs(mnt):
        return Outcome(False, note="cannot mount a tmpfs here (root needed)")
    try:
        store = mnt / "store"
        if _sweep(tmp, [], store).returncode != 0:
            return Outcome(False, note="first sweep failed")
        left = rng.randrange(16, 96) * 1024
        filler = mnt / "filler"
        filler.write_bytes(b"\0" * max(0, shutil.disk_usage(mnt).free - left))
        args = ["hydra.mode=MULTIRUN", "seed=1,2"]
        before = _files(tmp, NOT_STORE + ("mnt",))
        t0 = time.perf_counter()
        full = _sweep(tmp, args, store)
        seconds = time.perf_counter() - t0
        lines = full.stderr.splitlines()
        named = (full.returncode == 1 and "Traceback" not in full.stderr and len(lines) == 2 and all(
            line.startswith(f"error: job #{i} (") and f"the file system of the store {store}" in line
            for i, line in enumerate(lines)))
        outside = _written(before, _files(tmp, NOT_STORE + ("mnt",)))
        filler.unlink()
        if _sweep(tmp, args, store).returncode != 0:
            return Outcome(False, seconds=seconds, note="rerun after freeing space failed")
        out = _cell_outcome(tmp, Counter(), expected_cells=3, store=store)
        out.survived, out.outside, out.seconds = out.survived and named, outside, seconds
        out.note = f"{left // 1024} KB left" + ("" if named else f"; stderr: {full.stderr[-200:]}")
        return out
    finally:
        _umount(mnt)


REPAIR_STEPS = ("repair_build", "repair_built", "repair_intent", "repair_kept", "repair_sidecars", "repair_swapped")


def interrupted_repair(tmp: Path, rng: random.Random) -> Outcome:
    """``doctor --fix`` on a damaged store, killed at each step of the repair: ``mlflow.db`` is always there,
    ``doctor`` names what was left, ``--fix`` completes it (the damaged file kept) and the next sweep finishes."""
    import sqlite3

    if _sweep(tmp, [], tmp / "made").returncode != 0:
        return Outcome(False, note="first sweep failed")
    db = tmp / "made" / "mlflow.db"
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = [p for (p,) in con.execute("SELECT pageno FROM dbstat WHERE name = 'params'")]
    with open(db, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * 4096)
            fh.write(bytes(rng.randrange(256) for _ in range(64)))
    damaged = db.read_bytes()
    ok, lost, outside, bad = True, 0, 0, []
    for step in REPAIR_STEPS:
        store = tmp / step
        shutil.copytree(tmp / "made", store)
        before = _files(tmp, NOT_STORE + tuple(REPAIR_STEPS) + ("made", "cache"))
        killed = subprocess.run([sys.executable, "-m", "countboard.cli", "doctor", "--store", str(store), "--fix"],
                                capture_output=True, cwd=tmp, env=sweep_env(tmp, COUNTBOARD_FAILPOINT=step))
        listed, _ = _countboard(tmp, "doctor", "--store", str(store))
        for _ in range(2):  # the second marks the run whose params were on the garbled pages
            _countboard(tmp, "doctor", "--store", str(store), "--fix")
        clean, _ = _countboard(tmp, "doctor", "--store", str(store))
        outside += _written(before, _files(tmp, NOT_STORE + tuple(REPAIR_STEPS) + ("made", "cache")))
        kept = [p for p in store.glob("mlflow.db.damaged-*") if p.read_bytes() == damaged]
        swept = _sweep(tmp, [], store).returncode == 0
        cell = _cell_outcome(tmp, Counter(), store=store) if swept else Outcome(False)
        fine = (killed.returncode == -9 and listed.returncode == 1 and "store is consistent" in clean.stdout
                and bool(kept) and swept and cell.survived)
        ok, lost = ok and fine, lost + cell.lost
        if not fine:
            bad.append(step)
    return Outcome(ok, lost=lost, outside=outside, note=f"{len(REPAIR_STEPS) - len(bad)}/{len(REPAIR_STEPS)} "
                   "steps" + (f"; failed at {', '.join(bad)}" if bad else ""))


def damaged_artifact(tmp: Path, rng: random.Random) -> Outcome:
    """A finished run's ``config.yaml`` cut at a random byte and its ``samples.parquet`` deleted: ``doctor`` names
    both, ``index --scan`` counts the run, ``--fix`` marks it for recompute keeping the bytes, the sweep redoes it."""
    store = tmp / "mlruns"
    if _sweep(tmp, []).returncode != 0:
        return Outcome(False, note="first sweep failed")
    art = next(store.glob("artifacts/*/*/artifacts"))
    config = (art / "config.yaml").read_bytes()
    cut = config[: rng.randrange(1, len(config))]
    (art / "config.yaml").write_bytes(cut)
    (art / "samples.parquet").unlink()
    before = _files(tmp, NOT_STORE + ("mlruns", "cache"))
    listed, seconds = _countboard(tmp, "doctor", "--store", str(store))
    scan, _ = _countboard(tmp, "index", "--scan", "--store", str(store))
    _countboard(tmp, "doctor", "--store", str(store), "--fix")
    outside = _written(before, _files(tmp, NOT_STORE + ("mlruns", "cache")))
    named = "config.yaml: " in listed.stdout and "samples.parquet: missing" in listed.stdout
    counted = "; 1 runs whose files differ from their manifest" in scan.stdout
    kept = any(p.read_bytes() == cut for p in art.glob("config.yaml.damaged-*"))
    if _sweep(tmp, []).returncode != 0:
        return Outcome(False, note="sweep after doctor --fix failed")
    out = _cell_outcome(tmp, Counter())
    out.survived = out.survived and named and counted and kept
    out.outside, out.seconds = outside, seconds
    out.note = f"config.yaml cut to {len(cut)} of {len(config)} bytes"
    return out


STORE_FAULTS.update({
    "full_store": ("store on a full file system (tmpfs), a 2-cell multirun, then rerun with space", full_store),
    "interrupted_repair": ("doctor --fix killed at each of its 6 steps on a damaged store", interrupted_repair),
    "damaged_artifact": ("a run's config.yaml cut short and samples.parquet deleted", damaged_artifact),
})


def run(trials: dict[str, int], seed: int) -> list[Row]:
    rng = random.Random(seed)
    rows = []
    for key, (label, fn) in {**FAULTS, **STORE_FAULTS}.items():
        row = Row(label)
        for i in range(trials[key]):
            with tempfile.TemporaryDirectory(prefix=f"fault-{key}-") as tmp:
                t0 = time.perf_counter()
                outcome = fn(Path(tmp), rng)
                print(f"{key} trial {i + 1}: survived={outcome.survived} recomputed={outcome.recomputed} "
                      f"lost={outcome.lost} outside={outcome.outside} seconds={outcome.seconds} {outcome.note} "
                      f"({time.perf_counter() - t0:.0f}s)", flush=True)
                row.outcomes.append(outcome)
        rows.append(row)
    return rows


def store_cells(row: Row) -> list[str]:
    """A row of the store-faults table."""
    n = len(row.outcomes)
    secs = [o.seconds for o in row.outcomes if o.seconds is not None]
    notes = sorted({o.note for o in row.outcomes if o.note})
    return [row.fault, str(n), f"{sum(o.survived for o in row.outcomes)}/{n}", str(sum(o.lost for o in row.outcomes)),
            str(sum(o.outside for o in row.outcomes)), f"{max(secs):.1f}" if secs else "-",
            "; ".join(notes)[:160] or "-"]


def _kept_rows(path: Path, labels: set[str]) -> dict[str, str]:
    """Table rows of the existing document for the faults ``labels`` (those not run this time, with ``--only``)."""
    if not path.exists():
        return {}
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] in labels:
            rows[cells[0]] = line
    return rows


def _table(header: list[str], fresh: dict[str, str], kept: dict[str, str], labels: list[str]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + [fresh.get(label) or kept[label] for label in labels if label in fresh or label in kept]


def write_doc(rows: list[Row], path: Path, command: str, load: str, seconds: float) -> None:
    labels = [label for label, _ in FAULTS.values()]
    store_labels = [label for label, _ in STORE_FAULTS.values()]
    done = {r.fault for r in rows}
    kept = _kept_rows(path, (set(labels) | set(store_labels)) - done)
    kill_table = _table(["fault", "trials", "survived", "units recomputed", "units lost"],
                        {r.fault: "| " + " | ".join(r.cells()) + " |" for r in rows if r.fault in labels}, kept, labels)
    store_table = _table(["fault", "trials", "survived", "units lost", "bytes written outside the store",
                          "seconds to the error", "notes"],
                         {r.fault: "| " + " | ".join(store_cells(r)) + " |" for r in rows if r.fault in store_labels},
                         kept, store_labels)
    mid = [o.note == "killed mid-creation" for r in rows for o in r.outcomes if "creation" in o.note]
    where = (f"{sum(mid)} of the {len(mid)} store-creation kills landed while the schema was being built (a "
             "`mlflow.db.creating-*` file was left behind and removed by the next command); the others before or "
             "after it.\n\n") if mid else ""
    extra = _own_sections(path)
    notes = "".join(f"{p}\n\n" for p in _own_notes(path, "Kills and races", keep_count=not where))
    runs = [line for line in _runs_lines(path) if command not in line]
    runs.append(f"- `{command}` ({seconds / 60:.1f} min; load average at the start {load}).")
    path.write_text(
        "# Reliability under faults\n\n"
        "What happens to a store when things go wrong on purpose: real processes, real signals, real files "
        "(`benchmarks/faults.py`). A trial *survived* when the next ordinary command works and the cell ends "
        "FINISHED with every unit; *units recomputed* are units computed more than once over all trials (at most "
        "the chunk in progress, `checkpoint_every` = 4 here); *units lost* are units missing from the final "
        "results and must be 0. The toy cell has 12 units; the concurrent trial runs 4 cells of 12. The kills "
        "during a checkpoint write, after run creation and during an index build land at a named point "
        "(`COUNTBOARD_FAILPOINT`, `countboard/tracking/failpoints.py`); the kill during store creation lands at "
        "a random moment.\n\n"
        "## Kills and races\n\n"
        + "\n".join(kill_table) + "\n\n" + where + notes +
        "## What users do to a store\n\n"
        "Copies, moves, read-only mounts, damage and a down server. *Bytes written outside the store* counts every "
        "file created or changed outside the store folder the commands were given (the sweeps' Hydra logs under "
        "`outputs/` and the toy dataset under `data/` excepted; SQLite's `-shm` index, which every reader updates, "
        "left out); it must be 0. *Seconds to the error* is how long the refusing command took (for an unreachable "
        "store: the wall time of the slowest of `index`, `leaderboard`, `doctor`, `compare`, `mlflow-ui` and a "
        "sweep, interpreter start-up included; the note gives the start-up of `countboard --help` measured beside "
        "them, which on a busy machine is itself seconds). A damaged "
        "store survives when the sweep refuses it in one line without changing a byte, `doctor --fix` recovers it "
        "(the damaged file kept beside it) and the next sweep finishes the cell with every unit.\n\n"
        + "\n".join(store_table) + "\n\n"
        "How the store rules work: `docs/architecture.md` (Resume and failure semantics, Store). Runs:\n\n"
        + "\n".join(runs) + "\n\nMachine: 2 cores shared with other jobs.\n\n"
        "How each fault is survived is described in `docs/architecture.md` (Resume and failure semantics); "
        "`countboard doctor` lists and repairs what a fault can leave behind (expired leases, RUNNING runs without "
        "an owner, a stale index, a damaged database).\n" + extra)


GENERATED_SECTIONS = ("Kills and races", "What users do to a store")


def _own_sections(path: Path) -> str:
    """The sections of the existing document this script does not write (kept, after its own)."""
    if not path.exists():
        return ""
    kept, keep = [], False
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("## "):
            keep = line[3:].strip() not in GENERATED_SECTIONS
        if keep:
            kept.append(line)
    return ("\n" + "".join(kept)) if kept else ""


def _own_notes(path: Path, section: str, keep_count: bool = False) -> list[str]:
    """Paragraphs after the table of a section this script writes, kept as they are: those written by hand, and
    the script's own count of where the store-creation kills landed when that fault did not run again
    (``keep_count``)."""
    if not path.exists():
        return []
    text = path.read_text()
    start = text.find(f"## {section}\n")
    if start < 0:
        return []
    body = text[start:].split("\n## ", 1)[0].split("\n\n")[1:]
    first_table = next((i for i, p in enumerate(body) if p.lstrip().startswith("|")), None)
    if first_table is None:
        return []
    after = [p.strip() for p in body[first_table + 1:] if p.strip()]
    return [p for p in after if keep_count or not re.match(r"\d+ of the \d+ store-creation kills", p)]


def _runs_lines(path: Path) -> list[str]:
    """The list of benchmark commands of the existing document (kept when only some faults run again)."""
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line.startswith("- `python benchmarks/faults.py")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few trials per fault")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", nargs="*", choices=sorted({**FAULTS, **STORE_FAULTS}), help="run only these faults")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "reliability.md")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    n = 1 if args.quick else args.trials
    trials = {k: (0 if args.only and k not in args.only else
                  (3 if k == "store_creation" and args.quick else (max(1, n // 2) if k == "concurrent_sweeps" else n)))
              for k in FAULTS}
    trials.update({k: 0 if args.only and k not in args.only else (1 if args.quick else max(1, n // 2))
                   for k in STORE_FAULTS})
    load = os.getloadavg()
    t0 = time.perf_counter()
    rows = [r for r in run(trials, args.seed) if r.outcomes]
    seconds = time.perf_counter() - t0
    command = "python benchmarks/faults.py" + (" --quick" if args.quick else f" --trials {args.trials}") + (
        f" --only {' '.join(args.only)}" if args.only else "")
    write_doc(rows, args.out, command, " / ".join(f"{x:.1f}" for x in load), seconds)
    print(json.dumps({r.fault: r.cells()[1:] + [str(sum(o.outside for o in r.outcomes))] for r in rows}, indent=1))
    if any(o.lost or o.outside for r in rows for o in r.outcomes) or not all(
            o.survived for r in rows for o in r.outcomes):
        sys.exit(1)


if __name__ == "__main__":
    main()
