"""Which errors say the store went away (``reach.store_failure``), and the one line a job prints for them."""

from __future__ import annotations

import pytest

from countboard.engine import Progress
from countboard.tracking.reach import store_failure


class MlflowException(Exception):
    """Stands for MLflow's exception: only its text is read."""


def _chained(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(("exc", "reason"), [
    (ConnectionRefusedError(111, "Connection refused"), "connection refused"),
    (ConnectionResetError(104, "Connection reset by peer"), "connection reset"),
    (TimeoutError("timed out"), "no answer in time"),
    (MlflowException("API request to http://h:1/api/2.0/mlflow/runs/get failed with exception "
                     "HTTPConnectionPool(host='h', port=1): Max retries exceeded with url: /x (Caused by "
                     "NewConnectionError(\"...: [Errno 111] Connection refused\"))"), "connection refused"),
    (MlflowException("API request to endpoint /api/2.0/mlflow/runs/log-batch failed with error code 503 != 200. "
                     "Response body: ''"), "it answered HTTP 503"),
    (MlflowException("API request to http://h:1/api/2.0/mlflow/runs/get failed with exception "
                     "HTTPConnectionPool(host='h', port=1): Max retries exceeded with url: /x (Caused by "
                     "ResponseError('too many 502 error responses'))"), "it answered HTTP 502"),
])
def test_lost_connections_are_named(exc, reason):
    assert store_failure(exc) == reason


def test_the_innermost_cause_names_it():
    assert store_failure(_chained(RuntimeError("wrapped"), ConnectionRefusedError(111, "x"))) == "connection refused"


@pytest.mark.parametrize("exc", [
    ValueError("bad value"), OSError(28, "No space left on device"),
    MlflowException("API request to endpoint /api/2.0/mlflow/runs/get failed with error code 404 != 200"),
    MlflowException("RESOURCE_DOES_NOT_EXIST: Run 'x' not found"),
])
def test_other_errors_are_not_a_lost_store(exc):
    assert store_failure(exc) is None


def test_the_line_names_the_store_the_step_and_what_is_kept():
    line = Progress("a · b · c", "http://127.0.0.1:5000", "writing a checkpoint", 8, 12).lost_store(
        ConnectionRefusedError(111, "Connection refused"))
    assert line == ("the MLflow server at http://127.0.0.1:5000 stopped answering during cell a · b · c, writing a "
                    "checkpoint (connection refused); start the server again (or restore the network to it), then "
                    "run the same command again: 8 of 12 units are checkpointed in the store and the rerun resumes "
                    "from them")


def test_an_error_of_the_task_itself_is_not_blamed_on_the_store():
    assert Progress("c", "http://h:1", None).lost_store(ConnectionRefusedError(111, "x")) is None

