"""``GET /`` answered before falcon (``api/rootdoc``) is falcon's answer:
the same status, headers in the same order, body, access log line and
metric labels, for a table of requests, with CORS on and off; only the
request id, the dates and the time taken differ."""

import contextlib
import io
import logging
import re
import wsgiref.util

import falcon
import pytest

from placement import deploy
from placement import logformat
from placement.api import app as api_app
from placement.api import metrics
from placement.api import middleware
from placement.api import rootdoc
from placement.web import request
from tests import fixtures

ORIGIN = "http://dashboard.example"
GLOBAL_ID = "req-12345678-1234-4234-8234-123456789012"
# (method, path, request headers, whether the layer answers it itself)
REQUESTS = [
    ("GET", "/", {}, True),
    *(
        ("GET", "/", {"HTTP_OPENSTACK_API_VERSION": "placement %s" % v}, True)
        for v in ("1.0", "1.14", "1.15", "1.39", "latest")
    ),
    ("GET", "/", {"HTTP_OPENSTACK_API_VERSION": "compute 2.1, placement 1.20"}, True),
    ("GET", "/", {"HTTP_X_OPENSTACK_PLACEMENT_API_VERSION": "1.15"}, True),
    ("GET", "/", {"HTTP_X_OPENSTACK_REQUEST_ID": GLOBAL_ID}, True),
    ("GET", "/", {"HTTP_X_OPENSTACK_REQUEST_ID": "not-an-id"}, True),
    ("GET", "/", {"HTTP_ORIGIN": ORIGIN}, True),
    ("GET", "/", {"HTTP_ORIGIN": "http://evil.example"}, True),
    ("GET", "/", {"HTTP_X_AUTH_TOKEN": "admin", "HTTP_X_ROLES": "reader"}, True),
    ("GET", "/", {"HTTP_X_USER_ID": "u1", "HTTP_X_PROJECT_ID": "p1"}, True),
    ("GET", "/?x=1", {"HTTP_ACCEPT": "text/html"}, True),
    ("GET", "/", {"HTTP_OPENSTACK_API_VERSION": "placement bad"}, False),
    ("GET", "/", {"HTTP_OPENSTACK_API_VERSION": "placement 1.40"}, False),
    ("GET", "/", {"HTTP_OPENSTACK_API_VERSION": "placement 0.9"}, False),
    ("GET", "/", {"CONTENT_LENGTH": "2"}, False),
    ("GET", "/", {"CONTENT_LENGTH": "x", "CONTENT_TYPE": "text/plain"}, False),
    ("HEAD", "/", {}, False),
    ("HEAD", "/", {"HTTP_OPENSTACK_API_VERSION": "placement 1.39"}, False),
    ("POST", "/", {}, False),
    ("DELETE", "/", {"HTTP_OPENSTACK_API_VERSION": "placement 1.15"}, False),
    (
        "OPTIONS",
        "/",
        {"HTTP_ORIGIN": ORIGIN, "HTTP_ACCESS_CONTROL_REQUEST_METHOD": "GET"},
        False,
    ),
    ("GET", "", {}, False),  # noauth2's 401: the layer is inside auth
]
# What differs between two answers to one request: the request id, the
# dates and the time taken.
_VARIABLE = [
    re.compile(r"req-[0-9a-f-]{36}"),
    re.compile(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT"),
    re.compile(r"time: [0-9.]+"),
    re.compile(r"^\S+ \S+ "),  # the log line's date and time
]


def _masked(text):
    # The inbound global id is kept: where it shows is part of the answer.
    text = text.replace(GLOBAL_ID, "GLOBAL")
    for pattern in _VARIABLE:
        text = pattern.sub("*", text)
    return text


@contextlib.contextmanager
def _pipelines(monkeypatch, **overrides):
    """The pipeline, and the same one without the layer (falcon answers
    ``/``), on one database."""
    with fixtures.overrides(**overrides) as conf:
        with fixtures.database("sqlite") as db:
            early = deploy.build_app(conf, db=db, sync_schema=False)
            with monkeypatch.context() as patched:
                patched.setattr(rootdoc, "VersionDocument", lambda app: app)
                plain = deploy.build_app(conf, db=db, sync_schema=False)
            yield early, plain


@pytest.fixture
def access_log():
    """The access log's lines, through the service's formatter."""
    logger = logging.getLogger(middleware.LOG.name)
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(
        logformat.ContextFormatter(
            project="placement", version="1", config=fixtures.configure()
        )
    )
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    yield handler.stream
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate


def _samples(metric, suffix):
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in metric.collect()
        for sample in family.samples
        if sample.name.endswith(suffix)
    }


def _served(app, environ):
    """The status, headers and body, masked."""
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, headers

    body = b"".join(app(environ, start_response))
    headers = [(name, _masked(value)) for name, value in seen["headers"]]
    return seen["status"], headers, _masked(body.decode())


def _environ(method, path, headers):
    path, _, query = path.partition("?")
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query}
    environ.update(headers)
    wsgiref.util.setup_testing_defaults(environ)
    return environ


def _answer(app, log, environ, monkeypatch):
    """Everything observed of one request, masked: the answer, the access
    line, the counts added and the latencies observed; and whether falcon
    was called."""
    falcon_calls = []
    called = falcon.App.__call__

    def counted(self, environ, start_response):
        falcon_calls.append(1)
        return called(self, environ, start_response)

    counts = _samples(metrics.REQUESTS, "_total")
    observed = _samples(metrics.LATENCY, "_count")
    log.seek(0)
    log.truncate()
    with monkeypatch.context() as patched:
        patched.setattr(falcon.App, "__call__", counted)
        answer = _served(app, environ)
    added = {
        labels: value - counts.get(labels, 0)
        for labels, value in _samples(metrics.REQUESTS, "_total").items()
        if value != counts.get(labels)
    }
    timed = {
        labels
        for labels, value in _samples(metrics.LATENCY, "_count").items()
        if value != observed.get(labels)
    }
    return (*answer, _masked(log.getvalue()), added, timed), bool(falcon_calls)


@pytest.mark.parametrize("cors", [False, True])
@pytest.mark.parametrize(("method", "path", "headers", "early"), REQUESTS)
def test_the_same_answer_as_falcons(
    monkeypatch, access_log, cors, method, path, headers, early
):
    overrides = {"cors.allowed_origin": [ORIGIN]} if cors else {}
    with _pipelines(monkeypatch, **overrides) as (shortcut, plain):
        answer, falcon_called = _answer(
            shortcut, access_log, _environ(method, path, headers), monkeypatch
        )
        expected, _ = _answer(
            plain, access_log, _environ(method, path, headers), monkeypatch
        )
    assert answer == expected
    assert answer[3].count("\n") == 1  # the access line
    assert falcon_called is not early or path == ""


@pytest.mark.parametrize("path", ["/", ""])
@pytest.mark.parametrize("version", ["", "placement 1.14", "placement 1.15"])
def test_the_layer_alone_as_falcon(path, version):
    """The empty path of a prefix mount (which only keystone lets through
    to the layer) and ``/``, the layer against falcon's app alone."""
    falcon_app = api_app.create_falcon_app()
    answers = []
    for served in (rootdoc.VersionDocument(falcon_app), falcon_app):
        environ = _environ("GET", path, {"HTTP_OPENSTACK_API_VERSION": version})
        answers.append(
            (
                _served(served, environ),
                environ.get(metrics.ROUTE_ENV),
                environ.get(middleware.VERSION_ENV),
            )
        )
    assert answers[0] == answers[1]


def test_the_kept_answer_is_dated_now(monkeypatch):
    """The answer kept per version header is made again when "now" is
    another second: its Last-Modified is the request's second, as
    falcon's is."""
    layer = rootdoc.VersionDocument(None)
    seen = []
    for now in ("Mon, 30 Nov 2026 10:00:00 GMT", "Mon, 30 Nov 2026 10:00:01 GMT"):
        monkeypatch.setattr(request, "http_now", lambda now=now: now)
        for _ in range(2):
            environ = _environ(
                "GET", "/", {"HTTP_OPENSTACK_API_VERSION": "placement 1.39"}
            )
            layer(environ, lambda status, headers: seen.append(dict(headers)))
            assert seen[-1]["last-modified"] == now
