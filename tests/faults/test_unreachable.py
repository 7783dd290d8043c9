"""A store that does not answer is one complete line naming its address, within seconds, from every command."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from countboard.errors import TrackingStoreError
from countboard.tracking.store import open_store, reach
from tests.faults.conftest import countboard

DOWN = "http://127.0.0.1:1"  # nothing listens on port 1: connection refused


@pytest.fixture
def silent_server():
    """A server that accepts connections and never answers: the slowest way for a store to be down."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    sock.close()


def test_a_refused_connection_is_reported_at_once():
    t0 = time.monotonic()
    with pytest.raises(TrackingStoreError) as err:
        open_store(DOWN).check()
    assert time.monotonic() - t0 < 10
    message = str(err.value)
    assert "\n" not in message and DOWN in message and "check that it is running" in message


def test_a_server_that_never_answers_is_reported_within_the_timeout(silent_server):
    t0 = time.monotonic()
    with pytest.raises(TrackingStoreError, match="cannot reach the MLflow server at"):
        reach(silent_server, timeout_s=2)
    assert time.monotonic() - t0 < 6


def test_the_index_reports_a_down_server_at_once(tmp_path):
    from countboard.index.builder import build_index

    t0 = time.monotonic()
    with pytest.raises(TrackingStoreError, match="cannot reach the MLflow server at http://127.0.0.1:1"):
        build_index(DOWN, tmp_path / "i.duckdb")
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("command", [["index"], ["leaderboard"], ["doctor"], ["compare"]])
def test_every_command_says_it_in_one_line(tmp_path, command):
    proc = countboard(*command, "--store", DOWN, cwd=tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stdout + proc.stderr
    assert "cannot reach the MLflow server at http://127.0.0.1:1" in errors[0]
    assert errors[0].endswith("(or use a local store folder)")  # whole, not cut
    assert "Traceback" not in proc.stderr
