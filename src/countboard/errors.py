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
