"""Prometheus multiprocess set-up for a server with several workers.

prometheus_client decides at import time whether samples live in process
memory or in per-process files under ``PROMETHEUS_MULTIPROC_DIR`` that
``/metrics`` adds up. So a server starting workers calls ``prepare()``
before anything imports ``placement.api.metrics`` (placement.cmd.api does):
this module deliberately imports nothing from prometheus_client.

``prepare()`` only names the directory; the old sample files are removed by
``claim()``, which the server runs once it is really starting (not for
``--help``), and only while it holds the directory's lock: a second command
run with the same directory (a shell, ``docker exec``) never wipes a live
server's counts.
"""

import atexit
import fcntl
import glob
import os
import shutil
import tempfile

ENV = "PROMETHEUS_MULTIPROC_DIR"
LOCK = "placement-api.lock"
_problem: str | None = None  # why the named directory cannot be used
_lock: int | None = None  # the held lock's file descriptor


def prepare() -> str:
    """Point ``PROMETHEUS_MULTIPROC_DIR`` at a usable directory: the one
    named there, or a new temporary one, removed again when the process
    that made it exits. A named directory that cannot be made is left for
    ``claim()`` to report (so that ``--help`` still works); meanwhile a
    temporary one stands in. Returns the directory."""
    global _problem
    path = os.environ.get(ENV)
    if path:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            _problem = "%s=%s cannot be used (%s)" % (ENV, path, e.strerror)
            path = None
    if not path:
        path = tempfile.mkdtemp(prefix="placement-prometheus-")
        pid = os.getpid()
        # Only the process that made it (gunicorn's master), not a worker.

        def remove() -> None:
            if os.getpid() == pid:
                shutil.rmtree(path, True)

        atexit.register(remove)
    os.environ[ENV] = path
    return path


def claim() -> bool:
    """Take the directory for this server and remove the sample files of
    earlier processes, so counts restart with the server. False (nothing
    removed) when another running server holds it; ValueError with a
    one-line message when the named directory cannot be used."""
    global _lock
    if _problem:
        raise ValueError(
            "%s: set it to a writable directory, or unset it to use a "
            "temporary one" % _problem
        )
    path = os.environ[ENV]
    fd = os.open(os.path.join(path, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _lock = fd  # held for the life of the server (its workers inherit it)
    mine = "_%d.db" % os.getpid()
    for stale in glob.glob(os.path.join(path, "*.db")):
        if not stale.endswith(mine):
            os.remove(stale)
    return True
