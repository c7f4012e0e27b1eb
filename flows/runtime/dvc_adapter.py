"""The small adapter between Prefect and DVC: stage order from DVC's own graph, one stage run
through ``dvc repro --single-item`` (so dvc.lock stays the single source of truth), and the stage's
dvc.lock entry rendered for a Prefect artifact.

Signals: every DVC command runs as the leader of its own process group (``dvc_process``), so ``dvc repro`` and
the ``python -m stages.<stage>`` it starts are stopped together, by this process only: whatever interrupts the
wait (KeyboardInterrupt, Prefect's TerminationSignal, SystemExit) first stops that group, DVC releasing its
locks (``stop_group``). ``exit_on_signal`` (the command-line entry points) bounds how long the process may take
to go after SIGTERM or SIGINT (see there for why Prefect alone can take minutes).
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from stages.shared.core import lineage
from stages.shared.core.vcs import VcsError

#: seconds a stopped stage gets after SIGINT (the stage exits 130, DVC releases its locks: ~4 s on 2 busy cores)
#: before SIGKILL (then DVC's lock entries name a dead process, which the next DVC command drops)
STAGE_STOP_S = 4.0
#: seconds the process gets after SIGTERM/SIGINT to unwind by itself before ``exit_on_signal`` kills what is left
EXIT_DEADLINE_S = 7.0
#: exit codes after a signal, as a shell reports them: 128 + the signal's number
EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}


def stage_graph(repo: str | Path) -> tuple[list[str], dict[str, set[str]]]:
    """Every stage in dependency order, and each stage's upstream stages (transitively), from DVC's own graph."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(repo)) as r:
        graph = r.index.graph  # edges: stage -> the stage it depends on
        order = [s.name for s in reversed(list(nx.topological_sort(graph)))]
        upstream = {s.name: {u.name for u in nx.descendants(graph, s)} for s in graph.nodes}
    return order, upstream


def dvc_status(repo: str | Path, stages: Sequence[str] = ()) -> dict:
    """``dvc status --json`` of ``stages`` (all when empty): stage -> what DVC finds changed; the one place it runs
    (``changed_stages`` here, ``flows.runtime.deps.dvc_changes`` for CI's lock check and `leakaudit lineage`)."""
    import json

    with dvc_process(["dvc", "status", "--json", *stages], repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True) as proc:
        out, err = proc.communicate()
    if proc.returncode != 0:
        raise VcsError(["dvc", "status", "--json", *stages], proc.returncode, err)
    return json.loads(out or "{}") or {}


def changed_stages(repo: str | Path) -> set[str]:
    """The stages ``dvc status`` finds not matching dvc.lock (any reason: a dep or param changed, an output missing,
    never run): one DVC call for the whole graph."""
    return set(dvc_status(repo))


def to_run(order: list[str], upstream: dict[str, set[str]], changed: set[str], force: bool) -> list[str]:
    """The stages that may need DVC: those ``dvc status`` found changed and everything downstream of them (an
    upstream rerun may change their inputs; DVC then decides). The others are up to date without asking DVC again."""
    return [s for s in order if force or s in changed or upstream.get(s, set()) & changed]


def time_table(results: list[dict]) -> str:
    """Per stage: ran or cached (up to date), and the wall seconds it took here (DVC's own check included)."""
    rows = [f"{'stage':<34} {'what':<7} {'seconds':>8}"]
    rows += [f"{r['stage']:<34} {'ran' if r['ran'] else 'cached':<7} {r['seconds']:>8.1f}" for r in results]
    total = sum(r["seconds"] for r in results)
    rows.append(f"{'total':<34} {sum(r['ran'] for r in results):>3} ran {total:>8.1f}")
    return "\n".join(rows)


def repro(stage: str, repo: str | Path, force: bool = False, echo: Callable[[str], None] = print) -> dict:
    """Run one stage through DVC; returns whether it ran (False = DVC found it up to date)."""
    cmd = ["dvc", "repro", "--single-item", stage] + (["--force"] if force else [])
    lines = []
    with dvc_process(cmd, repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                lines.append(line)
                echo(line)
        rc = proc.wait()
    if rc != 0:
        errors = [ln for ln in lines if ln.startswith(("error:", "ERROR:"))]
        raise RuntimeError(f"dvc repro {stage} failed (exit {rc}): {(errors or lines or ['no output'])[-1]}")
    ran = any(f"Running stage '{stage}'" in ln for ln in lines)
    return {"stage": stage, "ran": ran}


def run_dvc(cmd: list[str], repo: str | Path) -> int:
    """A DVC command with this process's stdout and stderr; its exit code."""
    with dvc_process(cmd, repo) as proc:
        return proc.wait()


@contextmanager
def dvc_process(cmd: list[str], repo: str | Path, **popen) -> Iterator[subprocess.Popen]:
    """``cmd`` started as the leader of a new process group (its own session: a signal to this process's group
    does not reach it); if the block is interrupted, the group is stopped (``stop_group``) before the exception
    goes on."""
    proc = subprocess.Popen(cmd, cwd=repo, start_new_session=True, **popen)
    try:
        yield proc
    except BaseException:
        stop_group(proc)
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def stop_group(proc: subprocess.Popen, grace: float = STAGE_STOP_S) -> None:
    """Stop the process group ``proc`` leads: SIGINT (a stage exits 130 and DVC, which ignores SIGINT while its
    stage runs, then releases its locks and exits), SIGKILL to whatever is left after ``grace`` seconds, or at
    once if a second signal cuts the wait short."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # nothing left in the group
            pass
        else:
            proc.wait()  # reap the leader (SIGKILL is not waited on for long)


@contextmanager
def exit_on_signal(deadline: float = EXIT_DEADLINE_S) -> Iterator[None]:
    """In the block, SIGTERM or SIGINT ends this process within ``deadline`` seconds, exit 143 or 130 (``EXIT_CODES``).

    SIGTERM raises SystemExit(143) (SIGINT stays KeyboardInterrupt, which ``stages.shared.core.cli.run_cli`` turns into
    130), so the stack unwinds: the running stage's group is stopped (``dvc_process``), Prefect records the run
    Crashed and stops its ephemeral server at exit. Alone that can take minutes: while a flow runs, Prefect's own
    SIGTERM handler is in place, and it passes the signal on to ours only after recording the crash, which it
    retries with back-off when its server is gone (a SIGTERM to the process group, or Ctrl-C in a terminal, reaches
    the server too: it is a child in the same group). So a watcher thread, woken through ``signal.set_wakeup_fd``
    whichever Python handler is installed, kills every child process still there ``deadline`` seconds after the
    first signal and exits. Outside the main thread: no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    previous_term = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    threading.Thread(target=_watch, args=(read_fd, deadline), name="exit-on-signal", daemon=True).start()
    try:
        yield
    except BaseException:
        raise  # the watcher stays: if a signal is why, it keeps the deadline through the interpreter's exit
    else:
        signal.signal(signal.SIGTERM, previous_term)
        signal.set_wakeup_fd(previous_fd)
        os.write(write_fd, b"\0")  # the watcher's stop byte (no signal has number 0); ignored once a signal came
        os.close(write_fd)


def _exit_on_sigterm(signum: int, frame) -> None:
    print(f"error: {signal.Signals(signum).name}: stopping (a rerun resumes)", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_CODES[signum])


def _watch(read_fd: int, deadline: float) -> None:
    """Read signal numbers (``signal.set_wakeup_fd``); ``deadline`` seconds after the first SIGTERM/SIGINT, kill
    the children left and exit. A stop byte (0) or end of file before any such signal: return."""
    first: tuple[int, float] | None = None  # (signal, when to exit)
    while True:
        timeout = None if first is None else max(0.0, first[1] - time.monotonic())
        if not select.select([read_fd], [], [], timeout)[0]:
            _kill_children_and_exit(first[0], deadline)
        data = os.read(read_fd, 64)
        if first is None:
            signums = [b for b in data if b in EXIT_CODES]
            if signums:
                first = (signums[0], time.monotonic() + deadline)
            elif not data or 0 in data:
                os.close(read_fd)
                return
        elif not data:  # end of file once a signal came: only the deadline is left
            time.sleep(max(0.0, first[1] - time.monotonic()))
            _kill_children_and_exit(first[0], deadline)


def _kill_children_and_exit(signum: int, deadline: float) -> None:
    import psutil  # a dependency of DVC

    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    print(f"error: {signal.Signals(signum).name}: still running {deadline:.0f} s after the signal (e.g. Prefect "
          f"retrying to record the crash on a server that is gone); killed {len(children)} child process(es), exiting",
          file=sys.stderr, flush=True)
    os._exit(EXIT_CODES[signum])


def artifact_key(stage: str) -> str:
    return "dvc-lock-" + re.sub(r"[^a-z0-9-]+", "-", stage.lower()).strip("-")


def lock_markdown(repo: str | Path, stage: str) -> str:
    rec = lineage.stage_record(lineage.load_lock(Path(repo) / "dvc.lock"), stage)
    if rec is None:
        return f"# {stage}\n\nNo dvc.lock entry (stage has not completed)."
    git = lineage.git_state(Path(repo))
    rows = ["| kind | path | md5 |", "|---|---|---|"]
    rows += [f"| dep | `{d['path']}` | `{d['md5']}` |" for d in rec["deps"]]
    rows += [f"| out | `{o['path']}` | `{o['md5']}` |" for o in rec["outs"]]
    params = "\n".join(f"- `{k}`: `{v}`" for k, v in rec["params"].items()) or "- (none)"
    return (f"# dvc.lock: {stage}\n\n`{rec['cmd']}`\n\ngit commit `{git['commit']}`"
            f"{' (dirty)' if git['dirty'] else ''}\n\n" + "\n".join(rows) + f"\n\n## params\n{params}\n")


#: the report files the run's headline artifact links to
REPORT_FILES = (("HTML report (self-contained)", "index.html"), ("markdown report", "report.md"),
                ("every number", "metrics.json"), ("headline numbers (`dvc metrics diff`)", "headline.json"),
                ("lineage of every number", "lineage.json"))


def headline_artifact(repo: str | Path) -> str | None:
    """The report's headline block plus a table of links to the report files (None before a report exists)."""
    from stages.shared.core.params import read_params

    report_dir = read_params(Path(repo) / "params.yaml")["report"]["out_dir"]
    folder = Path(repo).resolve() / report_dir
    head = folder / "headline.md"
    if not head.is_file():
        return None
    git = lineage.git_state(Path(repo))
    rows = ["| what | file |", "|---|---|"] + [f"| {what} | [{report_dir}/{name}]({(folder / name).as_uri()}) |"
                                               for what, name in REPORT_FILES if (folder / name).is_file()]
    return (f"# Headline\n\ngit commit `{git['commit']}`{' (dirty)' if git['dirty'] else ''}\n\n"
            + head.read_text() + "\n## Report\n\n" + "\n".join(rows) + "\n\n`leakaudit lineage "
            "reports/metrics.json:<path>` traces any number back to the raw files.\n")
