"""One Prefect API for a flow's driver and its Dask workers (the sweep's and the studies' LocalCluster): the
configured server, or a temporary one started here and exported to the workers."""
from __future__ import annotations

import contextlib
import os


def drain_prefect_workers() -> None:
    """Send Prefect's queued logs and events (blocking, bounded)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=30)


@contextlib.contextmanager
def shared_api():
    """One Prefect API for the driver and every LocalCluster worker: the configured PREFECT_API_URL, or else a
    temporary server started here and exported to the workers' environment (otherwise each worker process
    would start a temporary server of its own, about 20 s of CPU each and a share of a core while it runs)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start(timeout=int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")))
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before
        drain_prefect_workers()  # send what is queued while the server still answers (else: retries, then an error)
        server.stop()
