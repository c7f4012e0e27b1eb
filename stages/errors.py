"""User-facing errors and the CLI wrapper that turns them into one line and a non-zero exit."""
from __future__ import annotations

import sys
from typing import Callable, Sequence


class StageError(Exception):
    """An error caused by input (params, data files): reported as one line naming the culprit."""


class ConfigError(StageError):
    """A bad or missing key in params.yaml."""


class DataError(StageError):
    """A raw or intermediate data file that is missing, malformed or violates its contract."""


def one_line(msg: str) -> str:
    return " ".join(str(msg).split())


def setup_logging() -> None:
    """Our own loggers at INFO; third-party libraries stay at WARNING."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("stages").setLevel(logging.INFO)


def run_cli(main: Callable[[Sequence[str] | None], None], argv: Sequence[str] | None = None) -> None:
    """Run a stage entry point; a StageError becomes ``error: <msg>`` on stderr and exit code 2."""
    setup_logging()
    try:
        main(argv)
    except StageError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
