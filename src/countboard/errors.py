"""Errors with a message that says what was wrong, where, and what to do."""

from __future__ import annotations


class CountboardError(Exception):
    """Base class: the message is meant for the user as it stands."""


class ConfigError(CountboardError):
    """A configuration value is wrong or refers to something that does not exist."""


class DataNotFoundError(CountboardError):
    """Input data is missing at the configured path."""

    def __init__(self, path, config_key: str, how_to_get: str):
        self.path = path
        self.config_key = config_key
        super().__init__(f"data not found at {path} (config key `{config_key}`). {how_to_get}")


class TrackingStoreError(CountboardError):
    """The MLflow tracking store cannot be reached or used."""


DEBUG_ENV = "COUNTBOARD_DEBUG"


def debug_enabled() -> bool:
    """True when ``COUNTBOARD_DEBUG`` asks for tracebacks (``countboard --debug`` sets it)."""
    import os

    return os.environ.get(DEBUG_ENV, "").lower() not in ("", "0", "false", "no")


def user_message(exc: BaseException) -> str | None:
    """One line for an error the user can fix (ours, or an OS, Arrow or zip error, with its file); None for a bug.

    Example:
        >>> user_message(FileNotFoundError(2, "No such file or directory", "/x/a.parquet"))
        'No such file or directory: /x/a.parquet (FileNotFoundError)'
    """
    import zipfile

    if isinstance(exc, CountboardError):
        return str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or exc}: {exc.filename} ({type(exc).__name__})"
    if isinstance(exc, zipfile.BadZipFile):
        return f"not a readable zip archive: {exc}"
    if type(exc).__module__.startswith("pyarrow"):
        return f"Parquet/Arrow error: {exc}"
    return None
