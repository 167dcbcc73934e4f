"""Prometheus metrics: the WSGI layer that counts requests and ``GET
/metrics``, which also exports the domain events of ``placement.events``.

Multiprocess mode: when ``PROMETHEUS_MULTIPROC_DIR`` is set *before*
prometheus_client is first imported, every gunicorn worker writes its
samples to mmap files in that directory and ``/metrics`` (served by any
worker) adds them up; ``placement.api.multiproc.prepare()`` sets it up.
The only gauges are capacity's (``capacity_gauges``, kept out of the
multiprocess files), so a dead worker's files need no clean-up: its counts
stay part of the totals, as counters should. Without the variable the
process-local default registry is used (tests, one worker).
"""

import os
import time
from typing import Any
from typing import Callable

import falcon.routing
import prometheus_client
from prometheus_client import multiprocess

# Registers the domain event metrics, so GET /metrics always lists them.
from placement import events
from placement import mmapvalues
from placement.api import middleware
from placement.api import multiproc
from placement.api import routes

METRICS_PATH = "/metrics"
UNMATCHED = "unmatched"
# The route template falcon matched, left in the environ by the app
# (``app.VersionMiddleware``): the path is not routed twice.
ROUTE_ENV = "placement.route"
# Label values are bounded: any other request method counts as OTHER, so
# made-up methods cannot add series (and multiprocess file entries).
KNOWN_METHODS = frozenset(
    ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
)
OTHER_METHOD = "other"

REQUESTS = prometheus_client.Counter(
    "placement_http_requests",
    "HTTP requests by route template, method, status and microversion.",
    ["route", "method", "status", "microversion"],
)
LATENCY = prometheus_client.Histogram(
    "placement_http_request_duration_seconds",
    "Time from request to response start, by route template and method.",
    ["route", "method"],
)


def exposition() -> bytes:
    """The text exposition of every metric, summed over workers if any."""
    if os.environ.get(multiproc.ENV):
        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = prometheus_client.REGISTRY
    return prometheus_client.generate_latest(registry)


def metrics_app(gauges: Any = None) -> Callable[..., Any]:
    """``GET /metrics``: open like ``/``, Prometheus text format; with
    the capacity ``gauges`` (``capacity_gauges.Gauges``) when shapes are
    configured (their last result: a scrape never computes them)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response(
                "405 Method Not Allowed", [("Allow", "GET"), ("Content-Length", "0")]
            )
            return [b""]
        body = exposition()
        if gauges is not None:
            gauges.start()
            body += gauges.exposition()
        start_response(
            "200 OK",
            [
                ("Content-Type", prometheus_client.CONTENT_TYPE_LATEST),
                ("Content-Length", str(len(body))),
            ],
        )
        return [body] if environ["REQUEST_METHOD"] == "GET" else [b""]

    return app


class RouteTemplates:
    """Maps a request path to its route template (``/traits/{name}``) so
    labels stay bounded whatever paths clients send."""

    def __init__(self, extra_paths=()):
        self.router = falcon.routing.CompiledRouter()
        last = len(routes.ROUTES) - 1
        for i, (path, _) in enumerate(routes.ROUTES):
            # Compiled with the last route (routes.add_routes says why).
            self.router.add_route(path, object(), compile=i == last)
        self.extra = set(extra_paths)

    def template(self, path: str) -> str:
        if path in self.extra:
            return path
        if path == "":
            return "/"
        found = self.router.find(path)
        return found[3] if found else UNMATCHED


class MetricsMiddleware:
    """Counts and times every request that reaches it, whichever layer
    answers (auth 401s included)."""

    def __init__(self, app, extra_paths=()):
        self.app = app
        self.templates = RouteTemplates(extra_paths)
        self.latency = events.Children(LATENCY)
        # (route, method, status, microversion): its count and latency's
        # update (``mmapvalues.counted_and_timed``).
        self.recorders = {}

    def __call__(self, environ, start_response):
        started = time.monotonic()
        method = environ.get("REQUEST_METHOD")
        if method not in KNOWN_METHODS:
            method = OTHER_METHOD

        def _start_response(status, headers, exc_info=None):
            # Falcon's match, or (answered before it, or no route) our own.
            route = environ.get(ROUTE_ENV) or self.templates.template(
                environ.get("PATH_INFO", "")
            )
            code = status.split(" ", 1)[0]
            version = environ.get(middleware.VERSION_ENV, "-")
            labels = (route, method, code, version)
            record = self.recorders.get(labels)
            if record is None:
                record = self.recorders[labels] = mmapvalues.counted_and_timed(
                    REQUESTS.labels(*labels), self.latency(route, method)
                )
            record(time.monotonic() - started)
            return start_response(status, headers, exc_info)

        return self.app(environ, _start_response)
