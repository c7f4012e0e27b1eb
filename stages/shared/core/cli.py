"""The stage command line: parse ``--<option>`` and ``--params``, read params.yaml, run the stage.

Process-wide settings (telemetry off, log levels, the third-party warnings we know to be noise) are
set here, in the entry point, never when a module is imported. A StageError ends the process with
``error: <one line>`` on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import logging
import sys
import warnings
from typing import Any, Callable, Sequence

from .env import apply_offline_env
from .errors import ConfigError, StageError, one_line
from .params import PARAMS_FILE, read_params
from .replicas import replica_raw
from .requirements import run_requirements

#: third-party warnings that say nothing about our results
QUIET_WARNINGS = (
    # opacus: the new-token embedding's input is integer ids, so its full backward hook sees output grads only
    "Full backward hook is firing when gradients are computed",
    # opacus RDP accountant at very small delta: the optimal order is the largest alpha tried
    "Optimal order is the largest alpha",
)


def configure_process() -> None:
    """Environment defaults, logging and warning filters for a stage process."""
    apply_offline_env()
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("stages").setLevel(logging.INFO)


def stage_args(argv: Sequence[str] | None, doc: str | None, *required: str,
               extra: Sequence[tuple[str, dict]] = (),
               replica: bool = False) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse a stage CLI (``--<name>`` for each required option, ``--params`` and ``extra``) and read params.

    With ``replica``, ``--replica NAME`` runs the stage on replica NAME's params (``core.replicas.replica_raw``:
    its seeds and output locations, one run named NAME) and stands for every required option (``--run NAME``)."""
    ap = argparse.ArgumentParser(description=doc)
    for name in required:
        ap.add_argument(f"--{name}", required=not replica)
    if replica:
        ap.add_argument("--replica", help="run on this replica of replicas.sets (its own seeds and outputs)")
    for flag, kwargs in extra:
        ap.add_argument(flag, **kwargs)
    ap.add_argument("--params", default=PARAMS_FILE)
    args = ap.parse_args(argv)
    raw = read_params(args.params)
    for key, msg in run_requirements(raw):  # what the audit needs of every run: before this stage does anything
        raise ConfigError(f"{args.params}: {key}: {msg}")
    if replica and args.replica:
        raw = replica_raw(raw, args.replica, args.params)
        for name in required:
            setattr(args, name, args.replica)
    elif replica:
        missing = [f"--{n}" for n in required if getattr(args, n) is None]
        if missing:
            ap.error(f"the following arguments are required: {', '.join(missing)} (or --replica)")
    return args, raw


def run_cli(main: Callable[[Sequence[str] | None], None], argv: Sequence[str] | None = None) -> None:
    """Run a stage entry point; a StageError becomes ``error: <msg>`` on stderr and exit code 2."""
    configure_process()
    try:
        main(argv)
    except StageError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
