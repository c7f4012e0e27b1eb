"""Signals: `leakaudit run` stopped by SIGTERM in the middle of a fine-tune, as a user (or a scheduler) stops it,
exits within 10 s with 143, leaves no process and no held DVC lock behind, and the next run resumes the fine-tune
from its checkpoint and completes (slow: the reproduced tiny project, Prefect's ephemeral server).

The signal goes to the command's whole process group, as `kill -TERM -<pgid>` or a terminal's Ctrl-C does: it
then reaches Prefect's ephemeral server too, which is what made the command hang (Prefect retrying, for minutes,
to record the crash against its dead server). The two fast tests run the same parts (flows.runtime.dvc_adapter) in a
small script: a DVC command's process group stopped with its parent, and the deadline kept when a SIGTERM
handler (Prefect's, in the hang) does not return.
"""
import json
import os
import re
import signal
import subprocess
import time

import psutil
import pytest
import yaml
from testkit.project import PYTHON, ROOT, run

STEPS = 400  # long enough to be mid-run when the first checkpoint appears (finetune.checkpoint_every: 25)


def _start(project, log, env):
    """`leakaudit run --stages finetune@nondp` as the leader of its own process group."""
    return subprocess.Popen([PYTHON, "-m", "leakaudit.cli", "run", "--stages", "finetune@nondp"], cwd=project, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _alive(processes):
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _lock_holders(project):
    """Processes named in DVC's read/write locks (.dvc/tmp/rwlock) that are still running."""
    path = project / ".dvc/tmp/rwlock"
    if not path.is_file():
        return []
    locks = json.loads(path.read_text())
    pids = {e["pid"] for entries in locks.get("read", {}).values() for e in entries}
    pids |= {e["pid"] for e in locks.get("write", {}).values()}
    return [pid for pid in pids if psutil.pid_exists(pid)]


@pytest.mark.slow
def test_sigterm_mid_finetune_exits_fast_and_the_next_run_resumes(reproduced_project, tmp_path):
    project = reproduced_project
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["runs"]["nondp"]["steps"] = STEPS
    assert params["finetune"]["checkpoint_every"] < STEPS
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    checkpoint = project / params["finetune"]["checkpoint_dir"] / "nondp.pt"
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PREFECT_HOME": str(tmp_path / "prefect"),
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    first_log = tmp_path / "first.log"
    with first_log.open("w") as log:
        proc = _start(project, log, env)
        try:
            deadline = time.monotonic() + 150
            while not checkpoint.is_file():  # the fine-tune is past its first checkpoint: mid-stage
                assert proc.poll() is None and time.monotonic() < deadline, first_log.read_text()[-3000:]
                time.sleep(0.2)
            children = psutil.Process(proc.pid).children(recursive=True)
            commands = [" ".join(c.cmdline()) for c in _alive(children)]
            assert any("dvc repro --single-item finetune@nondp" in c for c in commands), commands
            assert any("-m stages.finetune --run nondp" in c for c in commands), commands
            sent = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)
            rc = proc.wait(timeout=10)  # raises TimeoutExpired (the test fails) if it hangs
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    out = first_log.read_text()
    assert rc == 143 and took < 10, (rc, took, out[-3000:])
    # nothing left: not the stage (dvc repro, python -m stages.finetune: their own process group), not the server
    time.sleep(0.5)
    assert not _alive(children), [c.cmdline() for c in _alive(children)]
    assert not [p for p in psutil.process_iter() if _pgid(p.pid) == proc.pid and p.status() != psutil.STATUS_ZOMBIE]
    assert not _lock_holders(project)
    assert checkpoint.is_file() and "Running stage 'finetune@nondp'" in out

    second_log = tmp_path / "second.log"
    with second_log.open("w") as log:
        again = _start(project, log, env)
        rc = again.wait(timeout=240)
    out = second_log.read_text()
    assert rc == 0, out[-3000:]
    resumed = re.search(r"run nondp: resumed from the checkpoint at step (\d+)", out)
    assert resumed and 0 < int(resumed.group(1)) < STEPS, out[-3000:]
    assert not checkpoint.exists()  # a completed run clears its checkpoint
    status = run(["dvc", "status", "finetune@nondp"], project).stdout
    assert "up to date" in status, status


GROUP = """
import subprocess, sys, time
from flows.runtime.dvc_adapter import dvc_process, exit_on_signal
sleep = "import time; time.sleep(60)"
like_dvc = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleep!r}]); time.sleep(60)"
with exit_on_signal():
    with dvc_process([sys.executable, "-c", like_dvc], ".") as proc:  # a process and its child, as dvc + stage
        print(proc.pid, flush=True)
        proc.wait()
"""

HANGING = """
import signal, subprocess, sys, time
from flows.runtime.dvc_adapter import exit_on_signal
with exit_on_signal(deadline=1.5):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    signal.signal(signal.SIGTERM, lambda *_: time.sleep(60))  # as Prefect's handler, retrying against a dead server
    print(child.pid, flush=True)
    time.sleep(60)
"""


def _script(code: str):
    """``code`` in a fresh interpreter, started in its own session; (process, the first line it prints)."""
    proc = subprocess.Popen([PYTHON, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    return proc, proc.stdout.readline().strip()


def _wait_group(pgid: int, timeout: float = 5.0) -> list:
    """The live (not zombie) processes left in process group ``pgid`` after up to ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while (left := [p for p in psutil.process_iter() if _pgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE]) \
            and time.monotonic() < end:
        time.sleep(0.1)
    return left


def test_sigterm_stops_the_dvc_process_group_and_exits_143():
    proc, leader = _script(GROUP)
    group = int(leader)
    try:
        end = time.monotonic() + 10
        while len(_wait_group(group, timeout=0)) < 2:  # the command and its child are up
            assert time.monotonic() < end
            time.sleep(0.1)
        assert _pgid(proc.pid) != group  # its own group: a signal to the parent's group does not reach it
        proc.send_signal(signal.SIGTERM)  # to the parent alone: it has to stop the group itself
        assert proc.wait(timeout=10) == 143
        assert not _wait_group(group)
    finally:
        for pgid in (proc.pid, group):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_deadline_holds_when_a_sigterm_handler_does_not_return():
    proc, child_pid = _script(HANGING)
    child = psutil.Process(int(child_pid))
    try:
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 143
        assert 1.5 <= time.monotonic() - sent < 5  # the deadline (1.5 s), not the handler's 60 s
        time.sleep(0.2)
        assert not _alive([child])  # killed on the way out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
