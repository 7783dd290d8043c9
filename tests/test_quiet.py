"""A quiet terminal: third-party warnings and INFO lines a user cannot act on stay off it (``countboard.quiet``)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from countboard import quiet
from countboard.errors import DEBUG_ENV

SRC = Path(__file__).resolve().parents[1] / "src"
PYTENSOR_BLAS = ("PyTensor could not link to a BLAS installation. Operations that might benefit from BLAS will be "
                 "severely degraded.\nThis usually happens when PyTensor is installed via pip.")
ARVIZ_REFACTOR = ("\nArviZ is undergoing a major refactor to improve flexibility and extensibility while maintaining "
                  "a user-friendly interface.")


@pytest.fixture
def restored_logging():
    levels = {name: logging.getLogger(name).level for name in (*quiet.LOGGERS, "countboard", "pymc")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_silence_filters_exactly_the_listed_warnings(restored_logging, monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    assert quiet.silence() is True
    quiet.silence()  # idempotent
    warnings.warn(PYTENSOR_BLAS, UserWarning, stacklevel=1)
    warnings.warn(ARVIZ_REFACTOR, FutureWarning, stacklevel=1)
    warnings.warn("PyTensor could not link to a BLAS installation", DeprecationWarning, stacklevel=1)  # another category
    warnings.warn("a library's new warning", UserWarning, stacklevel=1)
    assert [(w.category, str(w.message)) for w in restored_logging] == [
        (DeprecationWarning, "PyTensor could not link to a BLAS installation"), (UserWarning, "a library's new warning")]


def test_silence_raises_the_listed_loggers_only(restored_logging, monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    logging.getLogger("arviz").setLevel(logging.INFO)
    logging.getLogger("alembic").setLevel(logging.ERROR)
    quiet.silence()
    assert not logging.getLogger("arviz.preview").isEnabledFor(logging.INFO)
    assert logging.getLogger("arviz.preview").isEnabledFor(logging.WARNING)
    assert not logging.getLogger("mlflow.store.db.utils").isEnabledFor(logging.INFO)
    assert not logging.getLogger("matplotlib.font_manager").isEnabledFor(logging.INFO)
    assert logging.getLogger("alembic").level == logging.ERROR  # a stricter level is kept
    assert logging.getLogger("countboard").level == logging.NOTSET


@pytest.mark.parametrize(("offline", "given", "expected"), [
    ("1", None, "1"), ("1", "0", "0"), (None, None, None), ("0", None, None)])
def test_progress_bars_are_off_only_offline_unless_set(restored_logging, monkeypatch, offline, given, expected):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    for name, value in ((quiet.OFFLINE_ENV, offline), (quiet.PROGRESS_ENV, given)):
        monkeypatch.setenv(name, value or "")  # recorded, so the value silence() sets is undone after the test
        if value is None:
            monkeypatch.delenv(name)
    quiet.silence()
    assert os.environ.get(quiet.PROGRESS_ENV) == expected


@pytest.mark.parametrize(("given", "expected"), [(None, False), ("true", True)])
def test_mlflow_artifact_bar_is_off_unless_set(restored_logging, monkeypatch, given, expected):
    from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR

    monkeypatch.delenv(DEBUG_ENV, raising=False)
    monkeypatch.setenv(quiet.MLFLOW_PROGRESS_ENV, given or "")  # recorded, so silence()'s value is undone after
    if given is None:
        monkeypatch.delenv(quiet.MLFLOW_PROGRESS_ENV)
    quiet.silence()
    assert MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.get() is expected  # what MLflow's download reads


def test_debug_shows_everything(restored_logging, monkeypatch):
    monkeypatch.setenv(DEBUG_ENV, "1")
    logging.getLogger("arviz").setLevel(logging.NOTSET)
    assert quiet.silence() is False
    warnings.warn(PYTENSOR_BLAS, UserWarning, stacklevel=1)
    assert len(restored_logging) == 1
    assert logging.getLogger("arviz").level == logging.NOTSET


def test_verbose_shows_everything_without_debugging(restored_logging, monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    monkeypatch.setenv(quiet.VERBOSE_ENV, "1")
    logging.getLogger("hydra_plugins.hydra_joblib_launcher").setLevel(logging.NOTSET)
    assert quiet.silence() is False
    assert logging.getLogger("hydra_plugins.hydra_joblib_launcher").level == logging.NOTSET
    monkeypatch.setenv(quiet.VERBOSE_ENV, "0")
    assert quiet.silence() is True  # joblib's `Joblib.Parallel(…) is launching` line is off again
    assert not logging.getLogger("hydra_plugins.hydra_joblib_launcher._core").isEnabledFor(logging.INFO)


#: A line of the platform's own: a ``countboard`` logger's line, Hydra's report of a multirun's parent run, the
#: sweep's progress line or its summary (``countboard.tracking.progress``).
OWN_LINE = re.compile(r"^(\[[\d\-:, ]+\]\[(countboard(\.[\w.]+)?|HYDRA)\]|sweep \d+/\d+ cells: |sweep summary: |  )")


@pytest.mark.slow
def test_sweep_prints_only_its_own_lines(tmp_path):
    """A first multirun on a fresh machine (new ArviZ and Matplotlib caches, a new store) whose job compiles PyMC
    models in a joblib worker: each line on stdout and stderr is the platform's own. Every filtered source is hit:
    without ``silence`` (``COUNTBOARD_DEBUG=1``) this prints PyTensor's BLAS warning, ArviZ's refactor warning and
    the INFO lines of Matplotlib, ArviZ and MLflow."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "MPLCONFIGDIR": str(tmp_path / "mpl")}
    env.pop(DEBUG_ENV, None)
    env.pop("HYDRA_FULL_ERROR", None)
    env.pop("PYTHONWARNINGS", None)
    cmd = [sys.executable, "-m", "countboard.commands.sweep", "-m", "hydra/launcher=joblib",
           "hydra.launcher.n_jobs=1", "model=story_procedural_good", "task=text_acs", "task.sampler.draws=300",
           "task.sampler.tune=300", "dataset.n_prompts=300", "task.human.n_labelled=60",
           f"tracking.store_dir={tmp_path / 'store'}", f"hydra.sweep.dir={tmp_path / 'multirun'}", "progress=false"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert any("done story_procedural_good" in line for line in lines), lines
    foreign = [line for line in lines if not OWN_LINE.match(line)]
    assert foreign == [], "third-party lines reached the terminal:\n" + "\n".join(foreign)
