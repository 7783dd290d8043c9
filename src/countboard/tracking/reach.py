"""Whether a tracking store can be reached, said in one line before anything waits on it: a server's health
check within ``REACH_TIMEOUT_S``, a SQL database's driver and port, and MLflow's HTTP limits for the process."""

from __future__ import annotations

import os
import re
import time
from urllib.parse import urlparse

from countboard.errors import TrackingStoreError
from countboard.tracking import address


def first_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` of ``exc``, whole words only (for one-line errors)."""
    text = (str(exc).strip().splitlines() or [""])[0].strip()
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " …"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


#: The longest a command waits for a store server's first answer before it says it cannot reach it: with the
#: command's start-up (1-2 s on a quiet machine) a down server is named within 10 s. A health check answers in
#: milliseconds; a server busy for longer than this is not one a sweep can use either.
REACH_TIMEOUT_S = 5.0


def http_limits(timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Bound MLflow's HTTP calls in this process: ``timeout_s`` per request and two retries (MLflow's defaults,
    120 s and 7 retries with backoff, make a down server look like a hang of minutes); and the connect timeout of
    a PostgreSQL store (libpq's ``PGCONNECT_TIMEOUT``; none by default)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, int(timeout_s))))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("PGCONNECT_TIMEOUT", str(max(2, int(timeout_s))))


#: Database servers MLflow can keep its runs in: default port, and the first bytes the probe sends (PostgreSQL
#: answers an SSLRequest with one byte, ``S`` or ``N``; MySQL greets a new connection unasked).
_SQL_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mssql": 1433}
_PG_SSL_REQUEST = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")
_DRIVER_PACKAGES = {"psycopg2": "psycopg2-binary", "psycopg": "psycopg[binary]", "pg8000": "pg8000",
                    "asyncpg": "asyncpg", "mysqldb": "mysqlclient", "pymysql": "pymysql", "pyodbc": "pyodbc"}


def _sql_driver_missing(uri: str) -> str | None:
    """Why SQLAlchemy has no driver for the database URI ``uri`` here (one clause), else None."""
    try:
        from sqlalchemy.engine.url import make_url

        dialect = make_url(uri).get_dialect()
    except Exception as exc:  # an unknown dialect, a URI SQLAlchemy cannot parse
        return f"SQLAlchemy cannot use it ({first_line(exc)})"
    try:
        dialect.import_dbapi()
    except ImportError:
        package = _DRIVER_PACKAGES.get(dialect.driver, dialect.driver)
        return (f"its Python driver `{dialect.driver}` is not installed (pip install '{package}', or name an "
                f"installed driver in the URI, e.g. {dialect.name}+psycopg://)")
    return None


def _probe_sql(scheme: str, host: str, port: int, timeout_s: float) -> None:
    """Connect to ``host:port`` and see the database server answer (raises ``OSError`` when it does not)."""
    import socket

    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        if scheme in ("postgresql", "postgres"):
            sock.sendall(_PG_SSL_REQUEST)
            answer = sock.recv(1)
            if answer not in (b"S", b"N"):
                raise OSError(f"it answered {answer!r}, not as a PostgreSQL server does")
        elif scheme == "mysql" and not sock.recv(1):
            raise OSError("it closed the connection without greeting")


def reach(uri: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Raise at once (within ``timeout_s``) when the server of a store does not answer: an ``http(s)://`` MLflow
    server, or the database server of a ``postgresql://`` / ``mysql://`` / ``mssql://`` store (whose Python
    driver must also be installed). Local stores are not probed.

    Any HTTP answer counts as reachable (a proxy may refuse ``/health``); a PostgreSQL server must answer the
    first message of its protocol, a MySQL server greet. A refused or timed-out connection, or a name that does
    not resolve, is one line naming the address and what to check. Nothing here imports MLflow: commands call
    it before their heavy imports.

    Raises:
        TrackingStoreError: The server cannot be reached, or its driver is missing.
    """
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+")[0].lower()
    timeout_s = min(timeout_s, REACH_TIMEOUT_S)
    if scheme in _SQL_PORTS:
        _reach_sql(uri, scheme, timeout_s)
        return
    if scheme not in ("http", "https"):
        return
    import urllib.error
    import urllib.request

    http_limits(timeout_s)
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TrackingStoreError(
            f"cannot reach the MLflow server at {uri} ({reason}); check that it is running and that --store / "
            f"${address.TRACKING_URI_ENV} / tracking.uri names it (or use a local store folder)") from None


def _reach_sql(uri: str, scheme: str, timeout_s: float) -> None:
    """The database server answers first (a socket, no import), then its driver is looked up (SQLAlchemy's
    import takes seconds, paid only when there is a server to talk to)."""
    parsed = urlparse(uri)
    shown = redact(uri)
    http_limits(timeout_s)
    try:
        host, port = parsed.hostname, parsed.port or _SQL_PORTS[scheme]
    except ValueError as exc:  # a port that is not a number
        raise TrackingStoreError(f"cannot use the MLflow store {shown}: {exc}") from None
    if host:  # else a Unix socket (``?host=/run/postgresql``): the driver finds it, and fails fast if it is absent
        try:
            _probe_sql(scheme, host, port, timeout_s)
        except (OSError, ValueError) as exc:
            reason = f"no answer within {timeout_s:g} s" if isinstance(exc, TimeoutError) else exc
            raise TrackingStoreError(
                f"cannot reach the database server of the MLflow store {shown} at {host}:{port} ({reason}); check "
                f"that it is running and accepts connections there, and that --store / "
                f"${address.TRACKING_URI_ENV} / tracking.uri names it (or use a local store folder)") from None
    missing = _sql_driver_missing(uri)
    if missing:
        raise TrackingStoreError(f"cannot use the MLflow store {shown}: {missing}")


def redact(uri: str) -> str:
    """``uri`` with its password replaced by ``***`` (for messages).

    Example:
        >>> redact("postgresql://u:secret@db:5432/runs")
        'postgresql://u:***@db:5432/runs'
    """
    parsed = urlparse(uri)
    if parsed.password is None:
        return uri
    netloc = parsed.netloc.replace(f":{parsed.password}@", ":***@", 1)
    return parsed._replace(netloc=netloc).geturl()


#: Text of a request MLflow's REST client gave up on (it keeps no exception type of its own for it).
_HTTP_GAVE_UP = re.compile(r"API request to (?:endpoint )?(\S+) failed with (?:exception|error code (\d{3}))")
#: SQL errors that say the database server (or its connection) went away, as SQLAlchemy's drivers word them.
_SQL_GONE = ("connection refused", "server closed the connection", "connection to server", "could not connect",
             "terminating connection", "lost connection", "gone away", "connection reset", "connection failed",
             "unable to open database file", "connection is closed")
_ERRNO_WORDS = {"ECONNREFUSED": "connection refused", "ECONNRESET": "connection reset",
                "ECONNABORTED": "connection aborted", "EPIPE": "connection broken", "ETIMEDOUT": "timed out",
                "EHOSTUNREACH": "host unreachable", "ENETUNREACH": "network unreachable"}


def _reason(exc: BaseException) -> str | None:
    """Why one exception of a chain says the store went away (a few words), or None."""
    import errno

    name, module = type(exc).__name__, type(exc).__module__
    if isinstance(exc, TimeoutError) or name in ("ReadTimeout", "ConnectTimeout", "ReadTimeoutError", "Timeout"):
        return "no answer in time"
    if isinstance(exc, OSError) and errno.errorcode.get(exc.errno or -1) in _ERRNO_WORDS:
        return _ERRNO_WORDS[errno.errorcode[exc.errno]]
    if name == "RemoteDisconnected" or (isinstance(exc, ConnectionError) and not isinstance(exc, OSError)):
        return "the connection was closed"
    text = str(exc)
    if module.startswith(("sqlalchemy", "psycopg", "pymysql", "sqlite3")) and name in (
            "OperationalError", "InterfaceError", "DisconnectionError"):
        lower = text.lower()
        if any(words in lower for words in _SQL_GONE):
            return first_line(exc, 160)
    gave_up = _HTTP_GAVE_UP.search(text)
    if gave_up and gave_up.group(2):
        code = int(gave_up.group(2))
        return f"it answered HTTP {code}" if code >= 500 else None
    if gave_up or "Max retries exceeded" in text:
        words = re.search(r"\[Errno \d+\] ([^\"')]+)|too many (\d{3}) error responses", text)
        if words and words.group(2):
            return f"it answered HTTP {words.group(2)}"
        return words.group(1).strip().lower() if words else "no answer"
    return None


def store_failure(exc: BaseException) -> str | None:
    """A few words saying why the store stopped answering when ``exc`` (or what it was raised from) is a lost
    connection to it: a refused, reset or timed-out HTTP request, MLflow's REST client giving up on one, an HTTP
    5xx answer, or a SQL driver that lost its database server; None for anything else (a bug, a bad argument,
    a lock, a full disk: ``errors.write_error`` names those).

    Example:
        >>> store_failure(ConnectionRefusedError(111, "Connection refused"))
        'connection refused'
        >>> store_failure(ValueError("bad")) is None
        True
    """
    from countboard.errors import exception_chain

    reasons = [r for r in map(_reason, exception_chain(exc)) if r]
    return reasons[-1] if reasons else None  # the innermost cause says it most plainly


def store_name(uri: str) -> str:
    """How a message names a store: ``the MLflow server at URL``, ``the database server of the MLflow store
    URI`` (password hidden), or ``the local store FILE``.

    Example:
        >>> store_name("http://127.0.0.1:5000")
        'the MLflow server at http://127.0.0.1:5000'
    """
    where = address.parse(uri)
    if where.http_url:
        return f"the MLflow server at {where.http_url}"
    if where.db is not None:
        return f"the local store {where.db}"
    return f"the database server of the MLflow store {redact(uri)}"


def store_todo(uri: str) -> str:
    """What the user does when the store of ``uri`` stopped answering (a clause)."""
    where = address.parse(uri)
    if where.http_url:
        return "start the server again (or restore the network to it)"
    if where.db is not None:
        return f"check it with `countboard doctor --store {where.folder}`"
    return "start the database server again (or restore the network to it)"
