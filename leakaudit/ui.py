"""``leakaudit ui``: a local Prefect server and the pipeline deployment served against it, in one command.

The server runs as a child process (``prefect server start``); once its health endpoint answers, the
deployment is served in this process (``leakaudit.serve``) with PREFECT_API_URL pointing at it. Ctrl-C stops
both."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Block until ``<url>/health`` answers, or raise one line if the server exits or never answers."""
    from stages.shared.core.errors import ConfigError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"prefect server exited with code {proc.returncode} (is the port already in use?)")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise ConfigError(f"prefect server did not answer at {url}/health within {timeout:.0f} s")


def start_server(port: int) -> tuple[subprocess.Popen, str]:
    from stages.shared.core.prefect_env import offline_defaults

    env = {**offline_defaults(), **os.environ}
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                             str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    api = f"http://127.0.0.1:{port}/api"
    try:
        wait_healthy(api, proc)
    except BaseException:
        proc.terminate()
        raise
    return proc, api


def serve_with_server(repo: str, port: int, name: str, cron: str | None) -> int:
    proc, api = start_server(port)
    os.environ["PREFECT_API_URL"] = api
    print(f"Prefect UI: http://127.0.0.1:{port}  (deployment 'leakage-audit-pipeline/{name}'"
          + (f", schedule '{cron}'" if cron else ", trigger it from the UI") + "; Ctrl-C stops)", flush=True)
    try:
        from stages.shared.core.prefect_env import apply_offline_defaults

        apply_offline_defaults()
        from leakaudit.serve import main as serve_main

        serve_main(["--name", name, "--repo", repo] + (["--cron", cron] if cron else []))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0
