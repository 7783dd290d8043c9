"""Shared fixtures: run real sweeps into a temporary MLflow store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Tiny random transformers models shared by the counter, explainer, generator and text tests.
from tests.fixtures.tiny_models import (  # noqa: F401
    make_items,
    tiny_clipseg_dir,
    tiny_grounding_dino_dir,
    tiny_owlv2_dir,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="module")
def hydra_init():
    """Hydra initialised on ``conf/`` for the tests of one module (``hydra.compose`` inside them)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from countboard.config import register_configs
    from countboard.paths import conf_dir

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        yield
    GlobalHydra.instance().clear()


@pytest.fixture(scope="module")
def compose_cfg(hydra_init):
    """``compose_cfg("model=oracle", ...)``: the composed root config with those overrides."""
    from hydra import compose

    return lambda *overrides: compose("config", overrides=list(overrides))


def sweep_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FIXTURES), env.get("PYTHONPATH", "")])
    env["COUNTBOARD_OUTPUTS"] = str(tmp_path / "outputs")
    env["COUNTBOARD_DATA_DIR"] = str(tmp_path / "data")
    env["HF_HUB_OFFLINE"] = "1"
    env["MLFLOW_ENABLE_ASYNC_LOGGING"] = "false"
    env.update(extra)
    return env


def run_sweep(args: list[str], tmp_path: Path, *, store: Path | None = None, toy: bool = False, check: bool = True,
              timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``countboard-sweep`` in a subprocess writing to ``store`` (default ``tmp_path/mlruns``).

    ``toy=True`` adds the test-only configs in ``tests/fixtures/conf`` to Hydra's search path.
    """
    store = store or tmp_path / "mlruns"
    cmd = [sys.executable, "-m", "countboard.commands.sweep", *args, "progress=false"]
    if not any(a.startswith(("tracking=", "tracking.")) for a in args):
        cmd.append(f"tracking.store_dir={store}")
    if toy:
        cmd.append(f"hydra.searchpath=[file://{FIXTURES / 'conf'}]")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or sweep_env(tmp_path),
                          cwd=tmp_path)
    if check and proc.returncode != 0:
        raise AssertionError(f"sweep failed ({proc.returncode}):\nSTDOUT\n{proc.stdout[-4000:]}\n"
                             f"STDERR\n{proc.stderr[-6000:]}")
    return proc


def store_runs(store: Path):
    """All runs of the local store as a DataFrame (mlflow.search_runs), parent and children."""
    import mlflow

    uri = f"sqlite:///{store.resolve() / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(search_all_experiments=True)


@pytest.fixture(scope="session")
def geckonum_dir() -> Path:
    """The GeckoNum release bundled with the package (the same files as ../shared/data/geckonum)."""
    from countboard.resources import GECKONUM_DIR

    assert (GECKONUM_DIR / "prompts.csv").is_file() and (GECKONUM_DIR / "geckonum_annotations.zip").is_file()
    return GECKONUM_DIR


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def mlflow_server_url(tmp_path):
    """A real ``mlflow server`` on a free loopback port (its own SQLite file); yields its URL."""
    import os
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start")
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=20)
