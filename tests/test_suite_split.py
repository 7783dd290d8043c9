"""`make test`, `make test-slow` and `make test-integration` together run every test exactly once, and `.ci/run`
runs all three (the unit suite stays fast by leaving the slow tests to the second target, never by dropping them)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("test", "test-slow", "test-integration")


def make_variables(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^([A-Z_]+)\s*:?=(.*)$", text, re.M)}


def recipe(text: str, target: str) -> str:
    """The pytest line of a Makefile target, with the Makefile's variables expanded."""
    body = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert body, f"no target `{target}` with a recipe in the Makefile"
    line = body.group(1).strip()
    variables = make_variables(text)
    for _ in range(3):
        line = re.sub(r"\$\(([A-Z_]+)\)", lambda m: variables.get(m.group(1), m.group(0)), line)
    return line


def selection(line: str) -> tuple[str, list[str]]:
    """The ``-m`` expression and the paths of a pytest command line (paths default to the configured testpaths)."""
    args = shlex.split(line)
    args = args[args.index("pytest") + 1:]
    marks, paths, skip = "", [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "-m":
            marks, skip = args[i + 1], True
        elif arg in ("-n", "--dist", "-p"):
            skip = True
        elif not arg.startswith("-"):
            paths.append(arg)
    return marks, paths or ["tests"]


def test_a_makefile_recipe_is_read_as_pytest_reads_it():
    text = "A := x\nPYTEST := env $(PY) -m pytest\nPY := py\n\nt: install\n\t$(PYTEST) -n 2 -m \"$(A) or y\" tests/a\n"
    assert recipe(text, "t") == 'env py -m pytest -n 2 -m "x or y" tests/a'
    assert selection(recipe(text, "t")) == ("x or y", ["tests/a"])
    assert selection("pytest -n 2 --dist loadfile -m 'not slow'") == ("not slow", ["tests"])


def test_ci_runs_the_three_parts_in_order():
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert [line for line in lines if line.startswith("make ")] == [f"make {t}" for t in TARGETS]


@pytest.mark.slow
def test_the_three_targets_partition_the_collected_tests(tmp_path):
    """Collects everything once (`-m "integration or not integration"` also lifts the default exclusion) and checks
    that each test is selected by exactly one target's marker expression and paths."""
    makefile = (REPO / "Makefile").read_text()
    parts = {t: selection(recipe(makefile, t)) for t in TARGETS}
    out = tmp_path / "collected.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p",
         "tests.fixtures.collected_marks", "-m", "integration or not integration", "tests"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "COUNTBOARD_COLLECTED": str(out), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = json.loads(out.read_text())
    assert len(collected) > 500 and any("integration" in marks for marks in collected.values())
    counts = dict.fromkeys(TARGETS, 0)
    wrong = []
    for nodeid, marks in collected.items():
        chosen = [t for t, (expr, paths) in parts.items()
                  if any(nodeid == p or nodeid.startswith(p.rstrip("/") + "/") for p in paths)
                  and Expression.compile(expr).evaluate(lambda name, marks=marks, **_: name in marks)]
        counts.update({t: counts[t] + 1 for t in chosen})
        if len(chosen) != 1:
            wrong.append(f"{nodeid}: {chosen or 'no target'}")
    assert not wrong, f"{len(wrong)} tests not run exactly once by {TARGETS}: {wrong[:10]}"
    assert sum(counts.values()) == len(collected) and all(counts.values()), counts
