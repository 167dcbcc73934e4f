"""Prometheus metrics: the WSGI layer that counts requests, ``GET /metrics``
and the tiny API other modules call to report domain events.

Multiprocess mode: when ``PROMETHEUS_MULTIPROC_DIR`` is set *before*
prometheus_client is first imported, every gunicorn worker writes its
samples to mmap files in that directory and ``/metrics`` (served by any
worker) adds them up; ``placement.api.multiproc.prepare()`` sets it up.
There are no gauges, so a dead worker's files need no clean-up: its counts
stay part of the totals, as counters should. Without the variable the
process-local default registry is used (tests, one worker).
"""

import os
import time

import falcon.routing
import prometheus_client
from prometheus_client import multiprocess

from placement.api import multiproc
from placement.api import routes

METRICS_PATH = "/metrics"
UNMATCHED = "unmatched"
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
CANDIDATES = prometheus_client.Histogram(
    "placement_allocation_candidates_returned",
    "Allocation candidates (allocation_requests) returned per request.",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000, float("inf")),
)
CONFLICT_RETRIES = prometheus_client.Counter(
    "placement_generation_conflict_retries",
    "Server-side retries of a write after losing a generation compare-and-swap.",
)
CATALOG = prometheus_client.Counter(
    "placement_catalog_requests",
    "Requests that asked for the provider catalog, by outcome: hit (it was "
    "current), read (this request read it again), sql (not current and "
    "being read by another request: plain SQL).",
    ["outcome"],
)
CONFLICTS = prometheus_client.Counter(
    "placement_generation_conflicts",
    "Requests answered 409 placement.concurrent_update.",
)


# The API other modules call. Each is a single counter update: cheap enough
# for any code path, and safe under gunicorn workers in multiprocess mode.


def conflict_retry():
    """A write lost a generation compare-and-swap and is being re-run."""
    CONFLICT_RETRIES.inc()


def generation_conflict():
    """A request is answered 409 placement.concurrent_update."""
    CONFLICTS.inc()


def catalog_used(outcome):
    """A request asked for the provider catalog: ``hit``, ``read`` or
    ``sql``."""
    CATALOG.labels(outcome).inc()


def candidates_returned(count):
    """GET /allocation_candidates answered with ``count`` candidates."""
    CANDIDATES.observe(count)


def exposition():
    """The text exposition of every metric, summed over workers if any."""
    if os.environ.get(multiproc.ENV):
        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = prometheus_client.REGISTRY
    return prometheus_client.generate_latest(registry)


def metrics_app(environ, start_response):
    """``GET /metrics``: open like ``/``, Prometheus text format."""
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        start_response(
            "405 Method Not Allowed", [("Allow", "GET"), ("Content-Length", "0")]
        )
        return [b""]
    body = exposition()
    start_response(
        "200 OK",
        [
            ("Content-Type", prometheus_client.CONTENT_TYPE_LATEST),
            ("Content-Length", str(len(body))),
        ],
    )
    return [body] if environ["REQUEST_METHOD"] == "GET" else [b""]


class RouteTemplates:
    """Maps a request path to its route template (``/traits/{name}``) so
    labels stay bounded whatever paths clients send."""

    def __init__(self, extra_paths=()):
        self.router = falcon.routing.CompiledRouter()
        for path, _ in routes.ROUTES:
            self.router.add_route(path, object())
        self.extra = set(extra_paths)

    def template(self, path):
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

    def __call__(self, environ, start_response):
        started = time.monotonic()
        method = environ.get("REQUEST_METHOD")
        if method not in KNOWN_METHODS:
            method = OTHER_METHOD
        route = self.templates.template(environ.get("PATH_INFO", ""))

        def _start_response(status, headers, exc_info=None):
            version = "-"
            for name, value in headers:
                if name.lower() == "openstack-api-version":
                    version = value.rpartition(" ")[2]
            code = status.split(" ", 1)[0]
            REQUESTS.labels(route, method, code, version).inc()
            LATENCY.labels(route, method).observe(time.monotonic() - started)
            return start_response(status, headers, exc_info)

        return self.app(environ, _start_response)
