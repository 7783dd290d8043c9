"""A quiet terminal: the exact BCC path, the BCC tasks and the sweep engine print no third-party warning."""

from __future__ import annotations

import subprocess
import sys

import pytest

# What a sweep of the BCC tasks imports and runs with the default (exact) posterior, in a fresh interpreter with
# Python's default warning filters, as a user's terminal shows them.
SCRIPT = """
import sys

import pytest
import countboard.engine, countboard.acs.tasks.bcc, countboard.acs.tasks.text_acs, countboard.numeracy.tasks.geckonum_bcc
from countboard.quantify import fit_bcc_batch, fit_bcc_multiclass
import numpy as np
fit = fit_bcc_batch(*np.array([[10, 4], [5, 1], [3, 2], [20, 30], [40, 10], [100, 80]]))
assert fit.method == "exact", fit.method
mc = fit_bcc_multiclass([[30, 5, 5], [4, 20, 6], [2, 3, 25]], [3000, 3000, 3900])
assert mc.method == "exact", mc.method
print(sorted(m for m in ("pymc", "pytensor") if m in sys.modules))
"""

# A demo-like text cell (two generators' stories, a lexicon classifier, binary and multi-class BCC) end to end.
TEXT_CELL = """
import sys

from countboard.acs.datasets.text_prompts import TextPromptSet
from countboard.acs.models.text_classifiers import LEXICON_MAP, VaderClassifier
from countboard.acs.models.text_procedural import ProceduralStoryGenerator
from countboard.acs.tasks.text_acs import TextACSTask
from countboard.results import RunContext
import pandas as pd

ctx = RunContext(device="cpu", seed=0, batch_size=8, work_dir=sys.argv[1], progress=False)
dataset = TextPromptSet(n_prompts=300)
model = ProceduralStoryGenerator()
task = TextACSTask(VaderClassifier(name="vader", label_map=LEXICON_MAP), multiclass=True)
records = pd.DataFrame(task.run_units(model, dataset, list(task.units(model, dataset, ctx)), ctx))
result = task.summarize(records, model, dataset, ctx)
assert set(result.tables["multiclass"]["method"]) == {"exact"}, result.tables["multiclass"]
assert "acs_mc_mean" in result.metrics
print(sorted(m for m in ("pymc", "pytensor") if m in sys.modules))
"""


def test_the_exact_bcc_path_imports_no_pymc_and_prints_no_warning():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"  # PyMC (and PyTensor's BLAS lines) only for method="nuts"
    assert proc.stderr == "", f"a third-party line reaches the user:\n{proc.stderr[-3000:]}"


@pytest.mark.slow
def test_a_text_cell_with_multiclass_bcc_imports_no_pymc(tmp_path):
    proc = subprocess.run([sys.executable, "-c", TEXT_CELL, str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"  # nothing compiled: PyMC / PyTensor only for nuts


@pytest.mark.slow
def test_a_nuts_fit_prints_no_pytensor_line():
    script = ("import numpy as np\nfrom countboard.quantify import SamplerConfig, fit_bcc_batch\n"
              "fit_bcc_batch(*np.array([[10], [5], [3], [20], [40], [100]]), method='nuts',\n"
              "              sampler=SamplerConfig(draws=50, tune=50, chains=1, cores=1))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BLAS" not in proc.stderr and "pytensor" not in proc.stderr.lower(), proc.stderr[-3000:]
