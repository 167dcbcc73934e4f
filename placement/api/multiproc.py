"""Prometheus multiprocess set-up for a server with several workers.

prometheus_client decides at import time whether samples live in process
memory or in per-process files under ``PROMETHEUS_MULTIPROC_DIR`` that
``/metrics`` adds up. So a server starting workers calls ``prepare()``
before anything imports ``placement.api.metrics`` (placement.deploy does):
this module deliberately imports nothing from prometheus_client.
"""

import atexit
import glob
import os
import shutil
import tempfile

ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare() -> str:
    """Point ``PROMETHEUS_MULTIPROC_DIR`` at an empty directory: the one
    already named there (its old sample files removed, so counts restart
    with the server) or a new temporary one, removed again when the process
    that made it exits. Returns the directory."""
    path = os.environ.get(ENV)
    if not path:
        path = tempfile.mkdtemp(prefix="placement-prometheus-")
        pid = os.getpid()
        # Only the process that made it (gunicorn's master), not a worker.

        def remove() -> None:
            if os.getpid() == pid:
                shutil.rmtree(path, True)

        atexit.register(remove)
    os.makedirs(path, exist_ok=True)
    for stale in glob.glob(os.path.join(path, "*.db")):
        os.remove(stale)
    os.environ[ENV] = path
    return path
