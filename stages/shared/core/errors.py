"""User-facing errors: each is reported by the stage CLI as one line naming the culprit."""
from __future__ import annotations


class StageError(Exception):
    """An error caused by input (params, data files): reported as one line naming the culprit."""


class ConfigError(StageError):
    """A bad or missing key in params.yaml."""


class DataError(StageError):
    """A raw or intermediate data file that is missing, malformed or violates its contract."""


def one_line(msg: object) -> str:
    return " ".join(str(msg).split())
