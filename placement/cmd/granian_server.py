"""``placement-api --server granian`` (the default): the WSGI app under
granian (a Rust HTTP/1.1 core: hyper parses requests and writes answers,
Python runs only the app), through granian's RSGI interface and
placement's adapter (``cmd/rsgi``), with what placement-api does under
gunicorn:

- the app and the provider catalog built once, in the master, and the
  workers forked from it (granian's multiprocess server forks on Linux;
  its ``target_loader`` runs in each worker after the fork and hands it
  the app already built);
- in each worker, before it serves: the catalog brought up to date, and
  its follower started (``worker_app``);
- a request's body read in granian's event loop, within 30 s of its head
  (else a 408), and only complete requests run on the worker's
  ``--threads`` threads, behind ``--active`` and the heavy-read gate;
- a request head must arrive within ``HEAD_TIMEOUT_MS``; a worker takes
  at most ``CONNECTIONS`` connections at once (granian's backpressure);
- SIGHUP replaces the workers one by one (each forked anew from the
  master's app), and a worker that dies is replaced
  (``respawn_failed_workers``).

What hyper refuses before the app sees it (a malformed request line, a
head over ``HEAD_BUFFER`` bytes) is answered by hyper itself: a 400 or
431 with an empty body, not the API's JSON error document.
"""

import os

from granian.constants import HTTPModes
from granian.constants import Interfaces
from granian.constants import TaskImpl
from granian.http import HTTP1Settings
from granian.log import LogLevels
from granian.server.mp import MPServer

from placement.cmd import rsgi

# A client's request head must be in within this (placement's worker:
# cmd/worker.HEAD_TIMEOUT).
HEAD_TIMEOUT_MS = 10_000
# Connections a worker holds at once (gunicorn's worker_connections).
CONNECTIONS = 1000
# The largest request head hyper buffers (its default, 8 KiB + 100 lines
# of 4 KiB): a larger one is answered 431.
HEAD_BUFFER = 8192 + 4096 * 100
# Seconds between two workers' replacements on SIGHUP: the next one is
# forked once the last one had time to warm up.
RESPAWN_INTERVAL = 1.0
# A worker that has not stopped this long after SIGTERM is killed.
KILL_TIMEOUT = 30

# granian's own messages (workers started and stopped) through placement's
# logging: its loggers propagate to the root logger placement set up.
# Incremental: a full dictConfig would close placement's handlers (a log
# file is reopened by its next line, a syslog socket is not).
LOGGING = {
    "incremental": True,
    "formatters": {},
    "handlers": {},
    "loggers": {
        "_granian": {"propagate": True, "handlers": []},
        "granian.access": {"propagate": True, "handlers": []},
    },
}


def serve(conf, app, worker_ready, in_loop):
    """Serve ``app`` (built in this process, its database's connections
    closed) until SIGINT or SIGTERM; ``worker_ready`` runs in each worker
    after the fork, before it serves; a cheap read may run at once, in
    granian's own thread, when ``in_loop()`` (``rsgi.App``)."""
    served = rsgi.App(
        app,
        conf.threads,
        conf.oslo_middleware.max_request_body_size,
        # Mounted under a prefix as gunicorn is told it.
        os.environ.get("SCRIPT_NAME", "").rstrip("/"),
        in_loop,
    )

    def worker_app():
        worker_ready()
        return served

    # A cheap read answered in granian's thread, not handed to the loop.
    rsgi.install_scheduler(served)
    server = MPServer(
        target="placement",
        address=conf.host,
        port=conf.port,
        interface=Interfaces.RSGI,
        # granian steps the request's coroutine itself: no asyncio Task
        # each (measured: GET / 0.21 -> 0.19 ms of server CPU).
        task_impl=TaskImpl.rust,
        http=HTTPModes.http1,
        websockets=False,
        workers=conf.workers,
        backpressure=CONNECTIONS,
        http1_settings=HTTP1Settings(
            header_read_timeout=HEAD_TIMEOUT_MS, max_buffer_size=HEAD_BUFFER
        ),
        log_level=LogLevels.info,
        log_dictconfig=LOGGING,
        respawn_failed_workers=True,
        respawn_interval=RESPAWN_INTERVAL,
        workers_kill_timeout=KILL_TIMEOUT,
    )
    server.serve(target_loader=worker_app, wrap_loader=False)
