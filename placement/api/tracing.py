"""Joining the traces other services send (osprofiler; doc/operations.md
"Tracing"). Installed only with ``[profiler] enabled``: a request whose
``X-Trace-Info`` is signed (``X-Trace-HMAC``) with one of ``[profiler]
hmac_keys`` gets a span in the configured driver, and each of its SQL
statements one more with ``trace_sqlalchemy`` (``db/engine.py``). Other
requests pass straight through; a bad signature is traced by nothing.

osprofiler sends spans through one notifier per process, whose driver may
hold a connection (the sqlalchemy driver) or a thread (the otlp driver's
exporter), neither of which survives a fork: ``start`` makes it in the
process that serves, after the fork (placement-api's workers as they
start, any other WSGI server's processes at their first traced request).
The otlp driver's stack of open spans is made one per thread.
"""

import collections
import os
import socket
import threading

from oslo_config import cfg
from osprofiler import initializer
from osprofiler import notifier
from osprofiler import web

# Spans name the service "placement-api" (the otlp driver's service.name
# is project-service).
PROJECT = "placement"
SERVICE = "api"
TRACE_INFO_ENV = "HTTP_X_TRACE_INFO"

# (pid, connection string) of the notifier this process made.
_started: tuple[int, str] | None = None
_lock = threading.Lock()


def start(conf: cfg.ConfigOpts) -> None:
    """This process's notifier for ``conf``'s ``[profiler]``, made once
    per process (and connection string)."""
    global _started
    wanted = (os.getpid(), conf.profiler.connection_string)
    if _started == wanted:
        return
    with _lock:
        if _started == wanted:
            return
        if _started is not None and _started[0] != wanted[0]:
            # Forked from a process that had made one: that driver's
            # connection and threads are the parent's.
            notifier.clear_notifier_cache()
        initializer.init_from_conf(
            conf,
            context=None,
            project=PROJECT,
            service=SERVICE,
            host=socket.gethostname(),
        )
        _open_spans_per_thread(getattr(notifier.get(), "__self__", None))
        _started = wanted


class _ThreadSpans(threading.local):
    """A stack of open spans per thread, in place of the otlp driver's one
    per process: a worker's threads serve requests at once, and with one
    stack a traced request's end would close another's span."""

    def __init__(self):
        self.stack = collections.deque()

    def append(self, span):
        self.stack.append(span)

    def pop(self):
        return self.stack.pop()


def _open_spans_per_thread(driver):
    if isinstance(getattr(driver, "spans", None), collections.deque):
        driver.spans = _ThreadSpans()


class Tracing:
    """osprofiler's WSGI middleware for the requests that carry a trace."""

    def __init__(self, app, conf):
        self.app = app
        self.conf = conf
        self.traced = web.WsgiMiddleware(
            self._whole, hmac_keys=conf.profiler.hmac_keys, enabled=True
        )

    def __call__(self, environ, start_response):
        if TRACE_INFO_ENV not in environ:
            return self.app(environ, start_response)
        start(self.conf)
        return self.traced(environ, start_response)

    def _whole(self, environ, start_response):
        # Read inside the request's span: a streamed answer (candidates
        # without a limit) is generated, and its statements run, there.
        result = self.app(environ, start_response)
        try:
            return [b"".join(result)]
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
