"""Commands leave nothing in the system temp folder: a sweep's work folder and every staging folder are removed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, run_sweep, sweep_env

TOY = ["--config-dir", str(FIXTURES / "conf"), "--config-name", "toy_config"]


@pytest.mark.slow
def test_a_sweep_and_an_index_leave_no_temp_folder(tmp_path):
    """Each job gets a work folder for its task's files (logged as artifacts); ``TMPDIR`` points every temp file
    of both processes at a folder of the test, which must be empty afterwards."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = sweep_env(tmp_path, TMPDIR=str(temp))
    run_sweep([*TOY, "-m", "model=toy,toy_double"], tmp_path, env=env)
    proc = subprocess.run([sys.executable, "-m", "countboard.cli", "index", "--store", str(tmp_path / "mlruns")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "mlruns" / "index.duckdb").is_file()
    assert sorted(p.name for p in temp.iterdir()) == []
