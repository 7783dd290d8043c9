"""``--help`` stays light: ``countboard --help``, every subcommand's ``--help`` and ``countboard-sweep --help`` run
in a fresh interpreter without importing the heavy libraries (they cost seconds and hundreds of MB)."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

from countboard.cli import _SUBCOMMANDS

HEAVY = ("torch", "transformers", "duckdb", "pandas", "mlflow", "hydra", "pymc", "streamlit")

# Runs ``countboard --help`` and then each subcommand's ``--help`` in one fresh interpreter and prints, as JSON, the
# subcommands and which heavy modules each ``--help`` had loaded by the time it returned.
_PROBE = """
import contextlib, io, json, sys
from countboard.cli import build_parser, main

def loaded():
    return sorted(m for m in HEAVY if m in sys.modules)

def help_of(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit:
            pass
    assert "usage:" in out.getvalue(), argv
    return loaded()

HEAVY = %r
seen = {"countboard": help_of(["--help"])}
commands = list(build_parser()._subparsers._group_actions[0].choices)
for command in commands:
    seen[command] = help_of([command, "--help"])
print(json.dumps(seen))
"""


def test_countboard_help_imports_nothing_heavy():
    proc = subprocess.run([sys.executable, "-c", _PROBE % (HEAVY,)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(seen) >= 12  # countboard and its 11 subcommands
    assert {"index", "compare", "train-counter", "import-praco", "import-geckonum", "doctor"} <= set(seen)
    assert {command: modules for command, modules in seen.items() if modules} == {}


def test_sweep_help_imports_nothing_heavy():
    """Not even Hydra: its own help composes every option of every group (seconds of CPU)."""
    probe = ("import sys; sys.argv = ['countboard-sweep', 'model=owlv2', '--help']\n"
             "from countboard.commands.sweep import main\n"
             "main()\n"
             f"print(sorted(m for m in {HEAVY + ('omegaconf',)!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: countboard-sweep [-m] [GROUP=OPTION ...]")
    assert "  model (default oracle): blip_gradcam, " in proc.stdout and "--cfg job" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_every_subcommand_runs_its_modules_run():
    for name in _SUBCOMMANDS:
        module = importlib.import_module(name)
        sub = argparse.ArgumentParser().add_subparsers()
        module.register(sub)
        (parser,) = sub.choices.values()
        assert parser.get_default("func") is module.run, name
