"""Every GPU claim of the project checked by one command (``make gpu-check``, ``bash benchmarks/gpu_check.sh``).

Steps, each in its own process, their output in ``<out>/gpu-check.log``:

1. ``pytest -m "gpu or torchvision"``: the GPU-only tests (device parity, pinned copies) and those that need
   torchvision (SAM 3 end to end, OmDet-Turbo against its processor; the GPU image has it), report in
   ``<out>/pytest-gpu.xml``;
2. ``praco_throughput.py``: OWLv2-base at 960 px and CLIPSeg at its real size, random weights, fp32 and bf16 (pairs/s,
   the model-only forward on the same batch and their ratio, GPU busy %, peak memory, host time per pair, bf16 counts
   against fp32), rows in ``<out>/praco.json``;
2b. ``dispatch_budget.py``: kernels per image of the negative-label test at the checkpoints' depth, counted (a
   target on every device), in ``<out>/dispatch.json``; ``praco_profile.py``: where a bf16 batch's time goes
   (``torch.profiler``), in ``<out>/profile.txt``; ``vlm_throughput.py``: SmolVLM-256M's architecture from its
   config, batched questions against one at a time (questions/s), in ``<out>/vlm.json``;
3. ``generator_throughput.py``: a Stable Diffusion 1.5-size pipeline in float16, the sweep's path against the
   pipeline's own batched call and the UNet alone, in ``<out>/generator.json``;
   ``geckonum_time.py``: time per image of GeckoNum's release path (reading a 1024 px image, the counter-based
   score with a base-size OWLv2, DSG + TIFA with the tests' tiny VLM), in ``<out>/geckonum.json``;
4. a real sweep (``owlv2,clipseg`` x ``praco_negative`` on generated ``synthetic_shapes``, tiny random models) with
   ``device=<device>`` into a temporary store, ``countboard index`` on it, the same cells with ``device=cpu`` into
   another store, and their records compared;
5. ``hydra/launcher=local_gpu`` over every visible GPU with the same two cells (on the CPU: two made-up GPU ids,
   and these CPU cells stand in for the device's in the comparison of records, which then runs but is ``n/a``);
6. the table of targets: one line per target (figure, target, PASS / FAIL / n/a) in ``<out>/gpu-check.md`` and
   ``<out>/gpu-check.json``.

Exit status 0 when every step ran and every target that applies passed. ``--device cpu`` runs the same steps on
the CPU (``--quick``: the tests' tiny models, a few seconds each), so that the check itself is tested without a GPU;
the targets that need a GPU are then ``n/a``, never PASS.

    python benchmarks/gpu_check.py --device cuda --out gpu-check
    python benchmarks/gpu_check.py --device cpu --quick --out /tmp/gpu-check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIME_BUDGET_S = 480  # the whole check on one H100-class GPU
COUNTERS = ("owlv2", "clipseg")
#: The tests of step 1: those that need a CUDA device, and those that need torchvision (which the GPU image has).
TEST_MARKS = "gpu or torchvision"


@dataclass
class Target:
    """One line of the final table."""

    name: str
    figure: str
    target: str
    status: str  # PASS, FAIL or n/a


def verdict(ok: bool | None, applies: bool) -> str:
    if not applies:
        return "n/a"
    return "PASS" if ok else "FAIL"


class Check:
    """Runs the steps, keeps their log, exit codes and times, and collects the targets."""

    def __init__(self, out: Path, device: str, quick: bool):
        self.out, self.device, self.quick = out, device, quick
        self.gpu = device.startswith("cuda")
        self.log = out / "gpu-check.log"
        self.steps: dict[str, dict] = {}
        self.targets: list[Target] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="gpu-check-"))
        self.stores: dict[str, Path] = {}

    def env(self) -> dict[str, str]:
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", MLFLOW_ENABLE_ASYNC_LOGGING="false",
                   COUNTBOARD_DATA_DIR=str(self.tmp / "data"), COUNTBOARD_OUTPUTS=str(self.tmp / "outputs"))
        paths = [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        return env

    def run(self, step: str, args: list[str], timeout: float) -> int:
        """``python <args>`` from the repository root, its output echoed and appended to the log."""
        cmd = [sys.executable, *args]
        with self.log.open("a") as log:
            log.write(f"\n== {step}: {' '.join(cmd)}\n")
            log.flush()
            print(f"== {step}: {' '.join(args)}", flush=True)
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace", start_new_session=True)

            def copy() -> None:
                for line in proc.stdout:
                    log.write(line)
                    sys.stdout.write(line)

            reader = threading.Thread(target=copy, daemon=True)
            reader.start()
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:  # a step that hangs is stopped; the steps after it still run
                os.killpg(proc.pid, signal.SIGKILL)  # with the workers it started
                proc.wait()
                rc = 124
                log.write(f"\n== {step}: stopped after {timeout:.0f} s\n")
            reader.join(timeout=10)
            seconds = time.perf_counter() - t0
            log.write(f"== {step}: exit {rc} after {seconds:.1f} s\n")
        print(f"== {step}: exit {rc} after {seconds:.1f} s", flush=True)
        self.steps.setdefault(step, {"rc": 0, "seconds": 0.0})
        self.steps[step]["rc"] = self.steps[step]["rc"] or rc
        self.steps[step]["seconds"] += seconds
        return rc

    def target(self, name: str, figure: str, target: str, ok: bool | None, applies: bool) -> None:
        self.targets.append(Target(name, figure, target, verdict(ok, applies)))

    # --- 1. the GPU-only tests -----------------------------------------------------------------------------------
    def gpu_tests(self) -> None:
        report = self.out / "pytest-gpu.xml"
        rc = self.run(f"pytest -m '{TEST_MARKS}'", ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-m",
                                                    TEST_MARKS, f"--junitxml={report}", *gpu_test_files()],
                      timeout=300)
        counts = junit_counts(report) if report.is_file() else None
        if counts is None:
            self.target(f"GPU-only and torchvision tests (pytest -m '{TEST_MARKS}')", f"no report (exit {rc})",
                        "all pass, none skipped", False, True)
            return
        figure = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
        ok = rc == 0 and counts["failed"] == 0 and counts["skipped"] == 0 and counts["passed"] > 0
        self.target(f"GPU-only and torchvision tests (pytest -m '{TEST_MARKS}')", figure, "all pass, none skipped",
                    ok, self.gpu)

    # --- 2. counters' throughput --------------------------------------------------------------------------------
    def praco(self) -> None:
        path = self.out / "praco.json"
        if self.quick:
            args = ["--size", "tiny", "--images", "2", "--classes", "3", "--threads", "1"]
        else:
            args = ["--images", "128", "--classes", "10", "--batch-size", "32", "--repeats", "3", "--threads", "4"]
        self.run("praco_throughput", ["benchmarks/praco_throughput.py", "--device", self.device, "--counters",
                                      ",".join(COUNTERS), "--precision", "fp32,bf16", "--json", str(path), *args],
                 timeout=300)
        rows = {(r["counter"], r["precision"]): r for r in json.loads(path.read_text())} if path.is_file() else {}
        self.praco_targets(rows)

    def praco_targets(self, rows: dict) -> None:
        def row(counter, precision):
            return rows.get((counter, precision))

        def rate(counter, precision, floor):
            r, name = row(counter, precision), f"{counter} {precision} pairs/s"
            if r is None:
                return self.target(name, "not measured", f">= {floor:,}", False, True)
            self.target(name, f"{r['cached_pairs_per_s']:,.0f} (forward {r['forward_pairs_per_s']:,.0f}; host "
                        f"{r['host_ms_per_pair']:.3f} ms/pair; peak {r['peak']})", f">= {floor:,}",
                        r["cached_pairs_per_s"] >= floor, self.gpu)

        def ratio(counter, precision, bound):
            r, name = row(counter, precision), f"{counter} {precision} forward rate / pipeline rate"
            if r is None:
                return self.target(name, "not measured", f"<= {bound}", False, True)
            value = 1 / r["ratio"]
            self.target(name, f"{value:.2f}", f"<= {bound}", value <= bound, self.gpu)

        rate("owlv2", "bf16", 2000)
        ratio("owlv2", "bf16", 1.4)
        ratio("owlv2", "fp32", 1.3)
        rate("clipseg", "bf16", 5000)
        busy = {f"{c} {p}": rows[(c, p)]["gpu_busy"] for c in COUNTERS for p in ("fp32", "bf16") if (c, p) in rows}
        values = [float(v.rstrip("%")) for v in busy.values() if v.endswith("%")]
        figure = ", ".join(f"{k} {v}" for k, v in busy.items()) or "not measured"
        self.target("GPU busy during the batched test (lowest)", figure, ">= 85%",
                    bool(values) and len(values) == len(busy) == 4 and min(values) >= 85, self.gpu)
        for counter in COUNTERS:
            vs = (row(counter, "bf16") or {}).get("vs_fp32")
            figure = ("not measured" if vs is None else f"{vs['within_tolerance']} of {vs['pairs']} pairs (largest "
                      f"difference {vs['max_abs_diff']:.2f}, {vs['changed']} rounded counts changed)")
            self.target(f"{counter} bf16 counts within tolerance of fp32", figure,
                        "every pair within max(1, 10% of fp32)",
                        vs is not None and vs["within_tolerance"] == vs["pairs"], self.gpu)

    # --- 3. the generator ---------------------------------------------------------------------------------------
    def generator(self) -> None:
        path = self.out / "generator.json"
        args = (["--quick"] if self.quick else
                ["--size", "sd15", "--images", "32", "--batch", "8", "--steps", "25", "--repeats", "2", "--threads", "4"])
        self.run("generator_throughput", ["benchmarks/generator_throughput.py", "--device", self.device,
                                          "--dtype", "float16", "--json", str(path), *args], timeout=300)
        if not path.is_file():
            return self.target("generator: pipeline rate / sweep rate", "not measured", "<= 1.2", False, True)
        result = json.loads(path.read_text())
        rates = result["rates"]
        figure = (f"{result['pipeline_over_sweep']:.3f} (images/s: sweep {rates['sweep']:.2f}, pipeline "
                  f"{rates['pipeline']:.2f}, UNet {rates['unet']:.2f}; {result['size']}, {result['image_px']} px)")
        self.target("generator: pipeline rate / sweep rate", figure, "<= 1.2", result["pipeline_over_sweep"] <= 1.2,
                    self.gpu)

    # --- 3b. GeckoNum's release path: time per image ------------------------------------------------------------
    def geckonum(self) -> None:
        """``geckonum_time.py``: reading a released 1024 px image, the counter-based score (OWLv2 at base size)
        and DSG + TIFA (the tests' tiny VLM) per image; a figure for ``docs/geckonum.md``, no target."""
        path = self.out / "geckonum.json"
        args = (["--images", "4", "--size", "256"] if self.quick else
                ["--images", "48", "--counter", "base", "--batch-size", "16", "--threads", "4"])
        self.run("geckonum_time", ["benchmarks/geckonum_time.py", "--device", self.device, "--json", str(path),
                                   *args], timeout=240)
        if not path.is_file():
            return self.target("GeckoNum release: ms per image", "not measured", "measured", False, True)
        r = json.loads(path.read_text())
        figure = (f"{r['size']} px: reading {r['read_ms_per_image']:.1f}, counter-based score "
                  f"({r['counter']} OWLv2) {r['counter_ms_per_image']:.1f}, DSG + TIFA (tiny VLM) "
                  f"{r['dsg_tifa_ms_per_image']:.1f} ms per image ({r['images']} images)")
        self.target("GeckoNum release: ms per image", figure, "measured (docs/geckonum.md)", True, self.gpu)

    # --- 2b. kernels per pair, where a batch's time goes, a model asked in words -----------------------------------
    def dispatch(self) -> None:
        """``dispatch_budget.py``: kernels per image of the negative-label test at the checkpoints' depth, counted
        (the same figure on any machine: it applies on the CPU too)."""
        path = self.out / "dispatch.json"
        self.run("dispatch_budget", ["benchmarks/dispatch_budget.py", "--json", str(path)], timeout=240)
        rows = json.loads(path.read_text()) if path.is_file() else []
        figure = ", ".join(f"{r['counter']} {r['precision']} {r['kernels']:.1f}" for r in rows) or "not measured"
        self.target("kernels per image (8 pairs), counted", figure, "within benchmarks/dispatch_budget.py BUDGETS",
                    bool(rows) and all(r["ok"] for r in rows), True)

    def profile(self) -> None:
        """``praco_profile.py``: the cached loop at two batch sizes and one run under ``torch.profiler`` (operators
        by device and host time), in ``<out>/profile.txt``; a figure for docs/benchmarks.md, no target."""
        path = self.out / "profile.txt"
        args = (["--size", "tiny", "--images", "4", "--classes", "3", "--batch-sizes", "2,4", "--threads", "1"]
                if self.quick else ["--images", "64", "--classes", "10", "--batch-sizes", "16,64", "--threads", "4"])
        rc = self.run("praco_profile", ["benchmarks/praco_profile.py", "--device", self.device, "--counters",
                                        ",".join(COUNTERS), "--precision", "bf16", "--out", str(path), *args],
                      timeout=240)
        self.target("profile of a bf16 batch (owlv2, clipseg)", f"{path.name} (exit {rc})",
                    "written (docs/benchmarks.md)", rc == 0 and path.is_file(), self.gpu)

    def vlm(self) -> None:
        """``vlm_throughput.py``: SmolVLM-256M's architecture built from its config (random weights), batched
        questions (each image encoded once) against one question at a time."""
        path = self.out / "vlm.json"
        args = (["--arch", "idefics3", "--quick"] if self.quick else
                ["--arch", "idefics3", "--size", "smolvlm-256m", "--images", "16", "--questions", "10",
                 "--batch-images", "8", "--repeats", "2"])
        self.run("vlm_throughput", ["benchmarks/vlm_throughput.py", "--device", self.device, "--json", str(path),
                                    *args], timeout=240)
        if not path.is_file():
            return self.target("VLM: batched questions / one at a time", "not measured", "measured", False, True)
        r = json.loads(path.read_text())
        figure = (f"{r['batched_questions_per_s']:.1f} vs {r['loop_questions_per_s']:.1f} questions/s "
                  f"({r['loop_s'] / r['batched_s']:.1f}x; {r['arch']} {r['size']}, {r['pairs']} questions)")
        self.target("VLM: batched questions / one at a time", figure, "measured (docs/benchmarks.md)", True,
                    self.gpu)

    # --- 4. a real sweep on the device and on the CPU -----------------------------------------------------------
    def sweep_args(self, device: str, store: Path, *extra: str) -> list[str]:
        """``countboard-sweep`` of the two counters (tiny random models, each its own ``model_id``: a union of two
        grids in an experiment preset written here) x ``praco_negative`` on generated ``synthetic_shapes``."""
        conf = self.tmp / "conf"
        if not conf.is_dir():
            from tests.fixtures.tiny_models import build_tiny_clipseg, build_tiny_owlv2

            models = self.tmp / "models"
            build_tiny_owlv2(models / "owlv2")
            build_tiny_clipseg(models / "clipseg")
            grids = "".join(f"      - model: {name}\n        model.model_id: {models / name}\n" for name in COUNTERS)
            (conf / "experiment").mkdir(parents=True)
            (conf / "experiment" / "gpu_check.yaml").write_text(
                "# @package _global_\ndefaults:\n  - override /hydra/sweeper: grids\n\n"
                f"hydra:\n  mode: MULTIRUN\n  sweeper:\n    grids:\n{grids}")
        data = (["dataset.n_classes=4", "dataset.images_per_class={train: 2, val: 1, test: 2}",
                 "dataset.multi_class_images=2"] if self.quick else [])
        return ["-m", "countboard.commands.sweep", "experiment=gpu_check", f"hydra.searchpath=[file://{conf}]",
                "dataset=synthetic_shapes", "task=praco_negative", f"device={device}", f"tracking.store_dir={store}",
                "progress=false", *data, *extra]

    def sweeps(self) -> None:
        self.stores = {device: self.tmp / f"store-{device}" for device in dict.fromkeys((self.device, "cpu"))}
        for device, store in self.stores.items():
            self.run(f"sweep device={device}", self.sweep_args(device, store), timeout=240)
        rc = self.run("countboard index", ["-m", "countboard.cli", "index", "--store", str(self.stores[self.device])],
                      timeout=120)
        self.target("countboard index of the device sweep's store", f"exit {rc}", "exit 0", rc == 0, True)

    # --- 5. one cell per GPU --------------------------------------------------------------------------------------
    def launcher(self) -> None:
        store = self.stores["local_gpu"] = self.tmp / "store-local-gpu"
        # without a GPU the launcher is given two made-up ids (each cell's CUDA_VISIBLE_DEVICES), as its test does
        extra = [] if self.gpu else ["hydra.launcher.gpus=[0,1]"]
        rc = self.run("hydra/launcher=local_gpu", self.sweep_args(self.device, store, "hydra/launcher=local_gpu",
                                                                   *extra), timeout=240)
        cells = store_cells(store) if rc == 0 else []
        finished = [c for c in cells if c["status"] == "FINISHED"]
        gpus = sorted({c["gpu"] for c in finished})
        figure = f"{len(finished)} of {len(COUNTERS)} cells finished on GPU ids {','.join(gpus) or '-'} (exit {rc})"
        self.target("hydra/launcher=local_gpu, every visible GPU", figure, "2 cells finished",
                    len(finished) == len(COUNTERS), self.gpu)

    def records(self) -> None:
        """The device sweep's records against the CPU sweep's; without a GPU (nothing to compare) the launcher's
        CPU cells stand in for the device's, so that the comparison itself runs."""
        other = self.stores[self.device] if self.gpu else self.stores["local_gpu"]
        equal, figure = compare_stores(other, self.stores["cpu"])
        self.target("CUDA records equal CPU records (fp32 sweep)", figure if self.gpu else f"CPU against CPU: {figure}",
                    "every cell equal", equal, self.gpu)

    # --- 6. the table ---------------------------------------------------------------------------------------------
    def finish(self, seconds: float) -> int:
        failed_steps = [name for name, s in self.steps.items() if s["rc"] != 0]
        self.target("the whole check", f"{seconds:.0f} s", f"<= {TIME_BUDGET_S} s", seconds <= TIME_BUDGET_S,
                    self.gpu and not self.quick)
        self.target("every step ran", "all exit 0" if not failed_steps else "failed: " + ", ".join(failed_steps),
                    "all exit 0", not failed_steps, True)
        table = render(self.targets, self.device_name())
        (self.out / "gpu-check.md").write_text(table)
        (self.out / "gpu-check.json").write_text(json.dumps(
            {"device": self.device_name(), "quick": self.quick, "seconds": round(seconds, 1), "steps": self.steps,
             "targets": [asdict(t) for t in self.targets]}, indent=1))
        print("\n" + table, flush=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return 0 if all(t.status != "FAIL" for t in self.targets) else 1

    def device_name(self) -> str:
        import torch

        if self.gpu and torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, torch {torch.__version__}"
        return f"cpu, torch {torch.__version__}"


def gpu_test_files() -> list[str]:
    """The test files that mark tests ``gpu`` or ``torchvision`` (``pytest.mark.gpu``), so that only they are
    collected: collecting the whole suite imports what only other tests need (streamlit, pymc), which the GPU
    machine lacks."""
    marks = ("mark.gpu", "mark.torchvision")
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if any(m in p.read_text(encoding="utf-8") for m in marks))


def junit_counts(report: Path) -> dict[str, int] | None:
    """Passed / failed / skipped tests of a pytest JUnit XML report (None when it cannot be read)."""
    try:
        root = ET.parse(report).getroot()
    except ET.ParseError:
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = total["failures"] + total["errors"]
    return {"passed": total["tests"] - failed - total["skipped"], "failed": failed, "skipped": total["skipped"]}


def store_cells(store: Path) -> list[dict]:
    """The cell runs of a local store: run id, model, status, GPU tag and the path of their records."""
    from tests.conftest import store_runs

    from countboard.tracking import tags as tg

    runs = store_runs(store)
    cells = runs[runs[f"tags.{tg.ROLE}"] == tg.ROLE_CELL]
    out = []
    for _, run in cells.iterrows():
        samples = next(store.glob(f"artifacts/*/{run['run_id']}/artifacts/samples.parquet"), None)
        gpu = run.get(f"tags.{tg.GPU}")
        out.append({"run_id": run["run_id"], "model": run[f"tags.{tg.MODEL}"], "status": run["status"],
                    "gpu": gpu if isinstance(gpu, str) else "-", "samples": samples})
    return out


def compare_stores(device_store: Path, cpu_store: Path) -> tuple[bool, str]:
    """Are the records of every cell the same in both stores (same units, every column equal)?"""
    import pandas as pd

    device = {c["model"]: c for c in store_cells(device_store)}
    cpu = {c["model"]: c for c in store_cells(cpu_store)}
    notes, equal = [], 0
    for model in COUNTERS:
        a, b = device.get(model), cpu.get(model)
        if a is None or b is None or a["samples"] is None or b["samples"] is None:
            notes.append(f"{model}: missing")
            continue
        left, right = (pd.read_parquet(c["samples"]).sort_values("unit_id").reset_index(drop=True) for c in (a, b))
        try:
            pd.testing.assert_frame_equal(left, right, check_exact=True)
            equal += 1
            notes.append(f"{model}: {len(left)} records equal")
        except AssertionError as exc:
            notes.append(f"{model}: differ ({str(exc).splitlines()[0]})")
    return equal == len(COUNTERS), "; ".join(notes)


def render(targets: list[Target], device: str) -> str:
    lines = [f"GPU check on {device}", "", "| target | figure | wanted | result |", "|---|---|---|---|"]
    lines += [f"| {t.name} | {t.figure} | {t.target} | {t.status} |" for t in targets]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (the check) or cpu (the check of the check)")
    parser.add_argument("--quick", action="store_true", help="the tests' tiny models and the shortest runs")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-check", help="where the reports go")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"error: --device {args.device} but torch {torch.__version__} sees no CUDA device; on a machine "
                  "without a GPU run `make gpu-check DEVICE=cpu QUICK=1`", file=sys.stderr)
            return 2
    check = Check(out, args.device, args.quick)
    t0 = time.perf_counter()
    for step in (check.gpu_tests, check.praco, check.dispatch, check.profile, check.vlm, check.generator,
                 check.geckonum, check.sweeps, check.launcher, check.records):
        step()
    return check.finish(time.perf_counter() - t0)


if __name__ == "__main__":
    raise SystemExit(main())
