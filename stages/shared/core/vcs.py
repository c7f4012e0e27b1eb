"""git and dvc as subprocesses, for the flows and the ``leakaudit`` command line: one place that runs them and one
error when they fail (the command and the tail of what it wrote). No stage imports it: a stage's lineage is DVC's
(dvc.lock), and ``stages.shared.core.lineage`` reads the git commit itself.

The long-running DVC commands whose output streams line by line and whose process group a signal stops
(``dvc repro``, ``dvc status`` of the pipeline) are ``flows.runtime.dvc_adapter``'s.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: lines of the failed command's stderr (else stdout) its error carries
TAIL_LINES = 3


class VcsError(RuntimeError):
    """A git or dvc command exited non-zero: the message names the command, its exit code and its last lines."""

    def __init__(self, cmd: list[str], returncode: int, output: str = ""):
        self.cmd, self.returncode = cmd, returncode
        self.tail = [ln.strip() for ln in output.strip().splitlines() if ln.strip()][-TAIL_LINES:]
        shown = " ".join(cmd)
        shown = shown if len(shown) <= 80 else " ".join(cmd[:3]) + " ..."
        super().__init__(f"{shown} failed (exit {returncode})" + (f": {' | '.join(self.tail)}" if self.tail else ""))


def _run(cmd: list[str], repo: str | Path, env: dict[str, str] | None = None, stream: bool = False) -> str:
    """``cmd`` in ``repo``; its stdout (``stream``: the output goes to this process's, and "" is returned).
    ``env``: values set over this process's environment."""
    proc = subprocess.run(cmd, cwd=repo, capture_output=not stream, text=True,
                          env={**os.environ, **env} if env else None)
    if proc.returncode != 0:
        raise VcsError(cmd, proc.returncode, "" if stream else (proc.stderr or proc.stdout))
    return "" if stream else proc.stdout


def git(repo: str | Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``git <args>`` in ``repo``: its stdout; ``VcsError`` when it fails."""
    return _run(["git", *args], repo, env)


def dvc(repo: str | Path, *args: str, env: dict[str, str] | None = None, stream: bool = False) -> str:
    """``dvc <args>`` in ``repo``: its stdout (``stream``: shown as it runs, e.g. a long ``dvc exp run``, and "" is
    returned); ``VcsError`` when it fails."""
    return _run(["dvc", *args], repo, env, stream)


def head(repo: str | Path) -> str:
    """The commit checked out in ``repo`` (full sha)."""
    return git(repo, "rev-parse", "HEAD").strip()


def git_dirty(repo: str | Path, *paths: str) -> bool:
    """Whether the working tree differs from HEAD in ``paths`` (all tracked files when none are given)."""
    cmd = ["git", "diff", "--quiet", "HEAD", "--", *paths]
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    # exit 1 is "differs", but also what git exits with when there is no HEAD to compare with (then it says why)
    failed = any(ln.startswith(("error:", "fatal:")) for ln in proc.stderr.splitlines())
    if proc.returncode not in (0, 1) or failed:
        raise VcsError(cmd, proc.returncode, proc.stderr)
    return proc.returncode == 1
