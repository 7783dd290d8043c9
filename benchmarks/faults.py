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

TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config", "progress=false"]
UNITS = [f"u{i:03d}" for i in range(12)]


@dataclass
class Outcome:
    survived: bool
    recomputed: int = 0
    lost: int = 0
    note: str = ""


@dataclass
class Row:
    fault: str
    outcomes: list[Outcome] = field(default_factory=list)

    def cells(self) -> list[str]:
        n = len(self.outcomes)
        return [self.fault, str(n), f"{sum(o.survived for o in self.outcomes)}/{n}",
                str(sum(o.recomputed for o in self.outcomes)), str(sum(o.lost for o in self.outcomes))]


def _sweep(tmp: Path, args: list[str], **env: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *TOY, *args, f"tracking.store_dir={tmp / 'mlruns'}"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=sweep_env(tmp, **env), timeout=600)


def _cells(tmp: Path):
    runs = store_runs(tmp / "mlruns")
    return runs[runs["tags.countboard.role"] == "cell"]


def _cell_outcome(tmp: Path, calls: Counter, expected_cells: int = 1) -> Outcome:
    import pandas as pd

    cells = _cells(tmp)
    ok = len(cells) == expected_cells and set(cells["status"]) == {"FINISHED"}
    lost = 0
    for run_id in cells["run_id"]:
        art = next((tmp / "mlruns").glob(f"artifacts/*/{run_id}/artifacts"), None)
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


FAULTS: dict[str, tuple[str, Callable]] = {
    "store_creation": ("kill -9 during store creation", store_creation),
    "checkpoint_write": ("kill -9 during a checkpoint write", kill_in_cell("checkpoint_write")),
    "log_params": ("kill -9 between run creation and log_params", kill_in_cell("log_params")),
    "index_build": ("kill -9 during an index build", index_build),
    "truncated_part": ("checkpoint part truncated at a random byte", truncated_part),
    "concurrent_sweeps": ("two concurrent sweeps of one 2x2 grid", concurrent_sweeps),
}


def run(trials: dict[str, int], seed: int) -> list[Row]:
    rng = random.Random(seed)
    rows = []
    for key, (label, fn) in FAULTS.items():
        row = Row(label)
        for i in range(trials[key]):
            with tempfile.TemporaryDirectory(prefix=f"fault-{key}-") as tmp:
                t0 = time.perf_counter()
                outcome = fn(Path(tmp), rng)
                print(f"{key} trial {i + 1}: survived={outcome.survived} recomputed={outcome.recomputed} "
                      f"lost={outcome.lost} {outcome.note} ({time.perf_counter() - t0:.0f}s)", flush=True)
                row.outcomes.append(outcome)
        rows.append(row)
    return rows


def _kept_rows(path: Path, run_labels: set[str]) -> dict[str, str]:
    """Table rows of the existing document for faults not run this time (``--only``)."""
    if not path.exists():
        return {}
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] in {label for label, _ in FAULTS.values()} - run_labels:
            rows[cells[0]] = line
    return rows


def write_doc(rows: list[Row], path: Path, command: str, load: str, seconds: float) -> None:
    header = ["fault", "trials", "survived", "units recomputed", "units lost"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    fresh = {r.fault: "| " + " | ".join(r.cells()) + " |" for r in rows}
    kept = _kept_rows(path, set(fresh))
    lines += [fresh.get(label) or kept[label] for label, _ in FAULTS.values() if label in fresh or label in kept]
    mid = [o.note == "killed mid-creation" for r in rows for o in r.outcomes if "creation" in o.note]
    where = (f"{sum(mid)} of the {len(mid)} store-creation kills landed while the schema was being built (a "
             "`mlflow.db.creating-*` file was left behind and removed by the next command); the others before or "
             "after it.\n\n") if mid else ""
    path.write_text(
        "# Reliability under faults\n\n"
        "What happens to a store when things go wrong on purpose: real processes, real signals "
        "(`benchmarks/faults.py`). A trial *survived* when the next ordinary command works and the cell ends "
        "FINISHED with every unit; *units recomputed* are units computed more than once over all trials (at most "
        "the chunk in progress, `checkpoint_every` = 4 here); *units lost* are units missing from the final "
        "results and must be 0. The toy cell has 12 units; the concurrent trial runs 4 cells of 12. The kills "
        "during a checkpoint write, after run creation and during an index build land at a named point "
        "(`COUNTBOARD_FAILPOINT`, `countboard/tracking/failpoints.py`); the kill during store creation lands at "
        "a random moment.\n\n"
        + "\n".join(lines) + "\n\n" + where +
        f"Command: `{command}` ({seconds / 60:.1f} min). Machine: 2 cores shared with other jobs; load average "
        f"at the start: {load}.\n\n"
        "How each fault is survived is described in `docs/architecture.md` (Resume and failure semantics); "
        "`countboard doctor` lists and repairs what a fault can leave behind (expired leases, RUNNING runs without "
        "an owner, a stale index).\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few trials per fault")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", nargs="*", choices=sorted(FAULTS), help="run only these faults")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "reliability.md")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    n = 1 if args.quick else args.trials
    trials = {k: (0 if args.only and k not in args.only else
                  (3 if k == "store_creation" and args.quick else (max(1, n // 2) if k == "concurrent_sweeps" else n)))
              for k in FAULTS}
    load = os.getloadavg()
    t0 = time.perf_counter()
    rows = [r for r in run(trials, args.seed) if r.outcomes]
    seconds = time.perf_counter() - t0
    command = "python benchmarks/faults.py" + (" --quick" if args.quick else f" --trials {args.trials}") + (
        f" --only {' '.join(args.only)}" if args.only else "")
    write_doc(rows, args.out, command, " / ".join(f"{x:.1f}" for x in load), seconds)
    print(json.dumps({r.fault: r.cells()[1:] for r in rows}, indent=1))
    if any(o.lost for r in rows for o in r.outcomes) or not all(o.survived for r in rows for o in r.outcomes):
        sys.exit(1)


if __name__ == "__main__":
    main()
