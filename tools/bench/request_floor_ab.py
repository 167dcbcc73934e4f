"""CPU per request, in process, of ``GET /`` and ``GET
/resource_providers/{uuid}`` with and without each of the fourth round's
cuts to the fixed cost (tools/bench/README, issue 45): the grant's key
(``policy.authorize``), the Accept answer kept (``errors.accepts``), the
HTTP date (``request.http_date``) and the request id
(``middleware.new_request_id``), the access log's record
(``middleware.log_request``), one context per request rather than two
(``middleware.ContextMiddleware``); the fifth round's one pass over the
answer's headers (``RequestIdMiddleware``, ``MetricsMiddleware``),
the log line's identity text kept (``logformat``), "now" as an HTTP
date once a second (``request.set_last_modified``), the version
document encoded once (``root.home``), the identity read from the keys
present (``RequestContext.identify``) and the process id kept for the
metric values (``procid``); the fifth round's together
(``"fifth round"``); ``GET /`` answered before falcon
(``rootdoc.VersionDocument``, ``"root early"``); a request's metric
values updated at once (``mmapvalues.counted_and_timed``, ``"one metric
update"``: before, prometheus_client's own multiprocess values, in files
of their own), the request's context copied from a blank one's
attributes (``context.of_request``, ``"context copied"``), the access line's
fields that are the same on every line written into its format once
(``ContextFormatter.line``, ``"line baked"``), the version
document's headers kept per version header and second
(``rootdoc.VersionDocument``, ``"root kept"``); the sixth round's
four together (``"sixth round"``); then all of them together. Run
it with ``PROMETHEUS_MULTIPROC_DIR`` set to an empty directory to count
as a server's workers do (mmap files).

The whole app is called directly (no HTTP) on a fresh MariaDB database
with one provider holding one allocation, the access log written to a
file as a server writes it; batches of 200 requests alternate the two
ways in one process, so a busy machine slows both alike: median and min
of 25 batches each (a first round not counted), the ratio of the
medians, and the bodies compared.

    .venv/bin/python tools/bench/request_floor_ab.py [cut ...]

``--parts`` times each cut's function alone instead (the same way, ten
times the batch): the cuts are a few microseconds each, less than the
noise of a whole request on a loaded machine.

    .venv/bin/python tools/bench/request_floor_ab.py --parts
"""

import datetime
import email.utils
import logging
import logging.handlers
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import profile_request  # noqa: E402
import prometheus_client  # noqa: E402
import small_reads_ab  # noqa: E402
from oslo_policy import policy as oslo_policy  # noqa: E402
from prometheus_client import values as prometheus_values  # noqa: E402

from placement import context  # noqa: E402
from placement import deploy  # noqa: E402
from placement import events  # noqa: E402
from placement import exception  # noqa: E402
from placement import logformat  # noqa: E402
from placement import mmapvalues  # noqa: E402
from placement import policy  # noqa: E402
from placement import procid  # noqa: E402
from placement import startup  # noqa: E402
from placement import versions  # noqa: E402
from placement.api import metrics  # noqa: E402
from placement.api import middleware  # noqa: E402
from placement.api import rootdoc  # noqa: E402
from placement.handlers import root  # noqa: E402
from placement.web import errors  # noqa: E402
from placement.web import microversion  # noqa: E402
from placement.web import request  # noqa: E402
from tests import fixtures  # noqa: E402

BATCH, BATCHES = 200, 25


def _authorize(context, rule, target=None):
    """policy.authorize before: the key made of the policy values."""
    if target is None:
        target = {"project_id": context.project_id, "user_id": context.user_id}
    enforcer = context.enforcer
    creds = context.to_policy_values()
    if not enforcer.conf.oslo_policy.enforce_scope:
        creds = dict(creds)
        for key in policy._SCOPE_CREDS:
            creds.pop(key, None)
    enforcer.follow_conf()
    granted = enforcer.granted
    if len(granted) > policy._GRANTED_MAX:
        granted.clear()
    try:
        key = (rule, policy._frozen(target), policy._frozen(creds))
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in granted:
        return
    try:
        enforcer.authorize(rule, target, creds, do_raise=True)
    except (oslo_policy.InvalidScope, oslo_policy.PolicyNotAuthorized):
        raise exception.PolicyNotAuthorized(rule)
    if key is not None:
        granted[key] = True


def _http_date(dt):
    """request.http_date before: email.utils."""
    return email.utils.format_datetime(
        dt.replace(tzinfo=datetime.timezone.utc), usegmt=True
    )


def _request_id():
    """middleware.new_request_id before: uuid.uuid4()."""
    return "req-%s" % uuid.uuid4()


def _log_request(environ, seen, started, request_id):
    """middleware.log_request before: the headers as a dict, LOG.info."""
    path = middleware.logged_path(environ)
    # The answer's headers as one header pass leaves them.
    headers = {
        "content-length": seen.get("length", "0"),
        "openstack-api-version": "placement " + seen.get("version", "-"),
    }
    middleware.LOG.info(
        middleware._LINE,
        environ.get("REMOTE_ADDR", "-"),
        environ.get("REQUEST_METHOD"),
        path,
        (seen.get("status") or "-").split(" ", 1)[0],
        headers.get("content-length", "0"),
        headers.get("openstack-api-version", "-").replace("placement ", ""),
        middleware._asked(environ),
        time.monotonic() - started,
        request_id,
    )


def _context_call(self, environ, start_response):
    """ContextMiddleware.__call__ before: a second context, from_environ's
    (the request id layer's first one is built either way)."""
    user_id = environ.get("HTTP_X_USER_ID") or environ.get("HTTP_X_USER")
    if not user_id and environ.get("PATH_INFO") not in ("/", ""):
        return middleware._unauthorized(start_response, "Unauthorized")
    roles = [r.strip() for r in environ.get("HTTP_X_ROLES", "").split(",") if r.strip()]
    environ[middleware.CONTEXT_ENV] = context.RequestContext.from_environ(
        environ,
        roles=roles,
        request_id=environ.get(middleware.REQUEST_ID_ENV),
        global_request_id=environ.get(middleware.GLOBAL_REQUEST_ID_ENV),
        db=self.db,
        enforcer=self.enforcer,
    )
    return self.app(environ, start_response)


def _request_id_call(self, environ, start_response):
    """RequestIdMiddleware.__call__ before one header pass: the answer's
    headers filtered, then looked through again by the log line."""
    request_id = middleware.new_request_id()
    environ[middleware.REQUEST_ID_ENV] = request_id
    inbound = environ.get("HTTP_X_OPENSTACK_REQUEST_ID", "")
    if middleware._GLOBAL_ID.match(inbound):
        environ[middleware.GLOBAL_REQUEST_ID_ENV] = inbound
    environ[middleware.CONTEXT_ENV] = context.RequestContext(
        request_id=request_id,
        global_request_id=environ.get(middleware.GLOBAL_REQUEST_ID_ENV),
    )
    accept = environ.get("HTTP_ACCEPT")
    if not accept or accept.strip() == "*/*":
        environ["HTTP_ACCEPT"] = "application/json"
    started = time.monotonic()
    seen = {}

    def _start_response(status, headers, exc_info=None):
        headers = [h for h in headers if h[0].lower() != "x-openstack-request-id"]
        headers.append(("x-openstack-request-id", request_id))
        seen["status"] = status
        seen["headers"] = headers
        return start_response(status, headers, exc_info)

    try:
        body = self.app(environ, _start_response)
    except Exception:
        seen.setdefault("status", "500")
        raise
    finally:
        if middleware.LOG.isEnabledFor(logging.INFO):
            _log_request_scan(environ, seen, started, request_id)
    return body


def _log_request_scan(environ, seen, started, request_id):
    """middleware.log_request before one header pass: the headers scanned."""
    length, version = "0", "-"
    for name, value in seen.get("headers", ()):
        name = name.lower()
        if name == "content-length":
            length = value
        elif name == "openstack-api-version":
            version = value
    args = (
        environ.get("REMOTE_ADDR", "-"),
        environ.get("REQUEST_METHOD"),
        middleware.logged_path(environ),
        (seen.get("status") or "-").split(" ", 1)[0],
        length,
        version.replace("placement ", ""),
        middleware._asked(environ),
        time.monotonic() - started,
        request_id,
    )
    logformat.log(middleware.LOG, logging.INFO, middleware._LINE, args)


def _metrics_call(self, environ, start_response):
    """MetricsMiddleware.__call__ before one header pass: the version
    looked for in the answer's headers."""
    started = time.monotonic()
    method = environ.get("REQUEST_METHOD")
    if method not in metrics.KNOWN_METHODS:
        method = metrics.OTHER_METHOD

    def _start_response(status, headers, exc_info=None):
        route = environ.get(metrics.ROUTE_ENV) or self.templates.template(
            environ.get("PATH_INFO", "")
        )
        version = "-"
        for name, value in headers:
            if name.lower() == "openstack-api-version":
                version = value.rpartition(" ")[2]
        code = status.split(" ", 1)[0]
        labels = (route, method, code, version)
        record = self.recorders.get(labels)
        if record is None:
            record = self.recorders[labels] = mmapvalues.counted_and_timed(
                metrics.REQUESTS.labels(*labels), self.latency(route, method)
            )
        record(time.monotonic() - started)
        return start_response(status, headers, exc_info)

    return self.app(environ, _start_response)


def _identity_text(self, identity, context):
    """ContextFormatter._identity_text before: made again on every line."""
    return identity.text % tuple([value or "-" for value in identity.read(context)])


def _log(logger, level, msg, args):
    """logformat.log before: the handler's flush, its lock taken again."""
    written = logformat._lines(logger, level, msg % args)
    if written is None:
        logger.log(level, msg, *args)
        return
    for handler, line in written:
        handler.acquire()
        try:
            if type(handler) is logging.handlers.WatchedFileHandler:
                handler.reopenIfNeeded()
            handler.stream.write(line + handler.terminator)
            handler.flush()
        finally:
            handler.release()


def _set_last_modified(req, resp, when, always=False):
    """request.set_last_modified before: "now" made and written anew."""
    if req.context.version < versions.LAST_MODIFIED:
        return
    resp.set_header("Cache-Control", "no-cache")
    if when is None and always:
        when = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    if when is not None:
        resp.set_header("Last-Modified", request.http_date(when))


def _home(req, resp):
    """root.home before: the version document encoded anew."""
    request.render(
        resp,
        {
            "versions": [
                {
                    "id": "v%s" % versions.MIN,
                    "max_version": str(versions.MAX),
                    "min_version": str(versions.MIN),
                    "status": "CURRENT",
                    "links": [{"rel": "self", "href": ""}],
                }
            ]
        },
    )
    request.set_last_modified(req, resp, None, always=True)


def _identify(self, environ, roles, db, enforcer):
    """RequestContext.identify before: every key looked for in turn."""
    for name, keys in context._ENVIRON_HEADERS.items():
        if name in context._IDS:
            continue
        for key in keys:
            if key in environ:
                setattr(self, name, environ[key])
                break
    service_roles = environ.get("HTTP_X_SERVICE_ROLES")
    self.service_roles = (
        [r.strip() for r in service_roles.split(",")] if service_roles else []
    )
    self.is_admin_project = (
        environ.get("HTTP_X_IS_ADMIN_PROJECT", "true").lower() == "true"
    )
    self.roles = roles or []
    self.db = db
    self.enforcer = enforcer
    self.update_store()


def _version_document(self, environ, start_response):
    """rootdoc.VersionDocument before: falcon answered ``GET /``."""
    return self.app(environ, start_response)


# The request metrics as prometheus_client's own multiprocess values keep
# them (MultiProcessValue with the process id kept, as events set it up
# before mmapvalues): metrics of no registry, in files of their own.
_BEFORE_ID = ["before"]


def _before_id():
    return _BEFORE_ID[0]


_BEFORE_VALUES = prometheus_values.MultiProcessValue(_before_id)


class _BeforeChildren(events.Children):
    """Children whose values are prometheus_client's (a child's values are
    made by the value class of when it is made)."""

    def __call__(self, *values):
        child = self.made.get(values)
        if child is None:
            prometheus_values.ValueClass = _BEFORE_VALUES
            try:
                child = self.made[values] = self.metric.labels(*values)
            finally:
                prometheus_values.ValueClass = mmapvalues.Value
        return child


_BEFORE_METRICS = (
    _BeforeChildren(
        prometheus_client.Counter(
            metrics.REQUESTS._name,
            metrics.REQUESTS._documentation,
            metrics.REQUESTS._labelnames,
            registry=None,
        )
    ),
    _BeforeChildren(
        prometheus_client.Histogram(
            metrics.LATENCY._name,
            metrics.LATENCY._documentation,
            metrics.LATENCY._labelnames,
            registry=None,
        )
    ),
)


def _metrics_update_call(self, environ, start_response):
    """MetricsMiddleware.__call__ before one metric update: the counter's
    inc and the histogram's observe, each value under its own lock."""
    started = time.monotonic()
    method = environ.get("REQUEST_METHOD")
    if method not in metrics.KNOWN_METHODS:
        method = metrics.OTHER_METHOD
    requests, latency = _BEFORE_METRICS

    def _start_response(status, headers, exc_info=None):
        route = environ.get(metrics.ROUTE_ENV) or self.templates.template(
            environ.get("PATH_INFO", "")
        )
        code = status.split(" ", 1)[0]
        version = environ.get(middleware.VERSION_ENV, "-")
        requests(route, method, code, version).inc()
        latency(route, method).observe(time.monotonic() - started)
        return start_response(status, headers, exc_info)

    return self.app(environ, _start_response)


def _line(self, name, levelno, message, created, context):
    """ContextFormatter.line before: every field of the line filled in
    on each line."""
    if (
        not logging.DEBUG < levelno < logging.WARNING
        or self._isotime
        or not logformat._plain(context)
        or type(context).get_logging_values is not logformat._LOGGING_VALUES
        or type(context).to_dict is not logformat._TO_DICT
        or self.converter is not time.localtime
    ):
        return None
    conf = self.conf
    plan = self._plans[
        conf.logging_context_format_string
        if context.request_id
        else conf.logging_default_format_string
    ]
    identity = self._identity
    if plan is None or identity is None:
        return None
    second = int(created)
    kept = self._second
    if kept is None or kept[0] != second:
        kept = self._second = (
            second,
            time.strftime(
                self.datefmt or self.default_time_format, time.localtime(second)
            ),
        )
    msecs = int((created - second) * 1000) + 0.0
    asctime = kept[1]
    if not self.datefmt and self.default_msec_format:
        asctime = self.default_msec_format % (asctime, msecs)
    made = (
        name,
        logging.getLevelName(levelno),
        levelno,
        procid.current() if logging.logProcesses else None,
        created,
        msecs,
        asctime,
        message,
        self.version,
        self._identity_text(identity, context),
        plan.error_summary,
        "",
        "",
        "",
    )
    return plan.text % plan.pick(made + plan.read(context))


def _of_request(request_id, global_request_id):
    """context.of_request before: oslo.context's __init__."""
    return context.RequestContext(
        request_id=request_id, global_request_id=global_request_id
    )


def _version_document_made(self, environ, start_response):
    """rootdoc.VersionDocument before: the answer's headers made for
    each request."""
    if (
        environ.get("REQUEST_METHOD") != "GET"
        or environ.get("PATH_INFO", "") not in rootdoc._PATHS
        or environ.get("CONTENT_LENGTH")
    ):
        return self.app(environ, start_response)
    try:
        version = microversion.extract_version(
            environ.get("HTTP_OPENSTACK_API_VERSION", "")
        )
    except rootdoc._REFUSED:
        return self.app(environ, start_response)
    shown = str(version)
    environ[metrics.ROUTE_ENV] = "/"
    environ[middleware.VERSION_ENV] = shown
    start_response(
        "200 OK",
        [
            ("content-type", "application/json"),
            *request.caching_headers(version, None, always=True),
            ("openstack-api-version", microversion.answered(shown)),
            ("vary", microversion.VARY),
            ("content-length", rootdoc._LENGTH),
        ],
    )
    return [root.DOCUMENT]


def _getpid():
    """procid.current before: a system call each time (its code is run
    with procid's globals, where os is)."""
    return os.getpid()


# name: [(module, attribute, before, after)]
CUTS = {
    "policy key": [(policy, "authorize", _authorize, policy.authorize)],
    "accept kept": [(errors, "accepts", errors._parsed_accepts, errors.accepts)],
    "http date": [(request, "http_date", _http_date, request.http_date)],
    "request id": [
        (middleware, "new_request_id", _request_id, middleware.new_request_id)
    ],
    "log line": [(middleware, "log_request", _log_request, middleware.log_request)],
    "one context": [
        (
            middleware.ContextMiddleware,
            "__call__",
            _context_call,
            middleware.ContextMiddleware.__call__,
        )
    ],
    "one header pass": [
        (
            middleware.RequestIdMiddleware,
            "__call__",
            _request_id_call,
            middleware.RequestIdMiddleware.__call__,
        ),
        (
            metrics.MetricsMiddleware,
            "__call__",
            _metrics_call,
            metrics.MetricsMiddleware.__call__,
        ),
    ],
    "identity kept": [
        (
            logformat.ContextFormatter,
            "_identity_text",
            _identity_text,
            logformat.ContextFormatter._identity_text,
        ),
        (logformat, "log", _log, logformat.log),
    ],
    "http now": [
        (request, "set_last_modified", _set_last_modified, request.set_last_modified)
    ],
    # The routes hold the function itself: its code is swapped.
    "document once": [(root.home, "__code__", _home.__code__, root.home.__code__)],
    "identify": [
        (
            context.RequestContext,
            "identify",
            _identify,
            context.RequestContext.identify,
        )
    ],
    # prometheus_client's values hold the function itself: its code is
    # swapped.
    "pid kept": [
        (procid.current, "__code__", _getpid.__code__, procid.current.__code__)
    ],
    "one metric update": [
        (
            metrics.MetricsMiddleware,
            "__call__",
            _metrics_update_call,
            metrics.MetricsMiddleware.__call__,
        )
    ],
    "context copied": [(context, "of_request", _of_request, context.of_request)],
    "line baked": [
        (
            logformat.ContextFormatter,
            "line",
            _line,
            logformat.ContextFormatter.line,
        )
    ],
    "root kept": [
        (
            rootdoc.VersionDocument,
            "__call__",
            _version_document_made,
            rootdoc.VersionDocument.__call__,
        )
    ],
    "root early": [
        (
            rootdoc.VersionDocument,
            "__call__",
            _version_document,
            rootdoc.VersionDocument.__call__,
        )
    ],
}
FIFTH = (
    "one header pass",
    "identity kept",
    "http now",
    "document once",
    "identify",
    "pid kept",
)
CUTS["fifth round"] = [swap for name in FIFTH for swap in CUTS[name]]
SIXTH = ("one metric update", "context copied", "line baked", "root kept")
CUTS["sixth round"] = [swap for name in SIXTH for swap in CUTS[name]]
CUTS["all"] = [
    swap
    for name, swaps in CUTS.items()
    if name not in ("fifth round", "sixth round")
    for swap in swaps
]
PATHS = ("/", "/resource_providers/" + small_reads_ab.RP)


def _setup(way, swaps):
    for module, name, before, after in swaps:
        setattr(module, name, before if way == "before" else after)


def _parts(conf):
    """Each cut's function alone, before and after, alternated in batches:
    {name: (callable(function), the swap's module and attribute)}."""
    ctx = context.RequestContext(
        user_id="admin",
        project_id="admin",
        roles=["admin"],
        enforcer=policy.Enforcer(conf),
    )
    when = datetime.datetime(2026, 11, 29, 18, 16, 35)
    environ = {
        "PATH_INFO": "/",
        "REQUEST_METHOD": "GET",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_OPENSTACK_API_VERSION": "placement 1.39",
    }
    seen = {
        "status": "200 OK",
        "headers": [
            ("content-type", "application/json"),
            ("content-length", "136"),
            ("openstack-api-version", "placement 1.39"),
            ("cache-control", "no-cache"),
            ("last-modified", "Sun, 29 Nov 2026 18:16:35 GMT"),
            ("x-openstack-request-id", "req-" + str(uuid.uuid4())),
        ],
        "length": "136",
        "version": "1.39",
    }
    return {
        "policy key": lambda f: f(ctx, "placement:resource_providers:show"),
        "accept kept": lambda f: f("application/json", "application/json"),
        "http date": lambda f: f(when),
        "request id": lambda f: f(),
        "log line": lambda f: f(environ, seen, time.monotonic(), "req-1"),
    }


def parts(conf):
    for name, run in _parts(conf).items():
        ((_, _, before, after),) = CUTS[name]
        found = {"before": [], "after": []}
        for batch in range(BATCHES + 1):
            for way, function in (("before", before), ("after", after)):
                start = time.process_time()
                for _ in range(BATCH * 10):
                    run(function)
                if batch:
                    found[way].append((time.process_time() - start) / BATCH / 10 * 1e6)
        before_us, after_us = (statistics.median(found[w]) for w in found)
        print(
            "%-12s alone: before %.2f us, after %.2f us, ratio %.3f"
            % (name, before_us, after_us, after_us / before_us),
            flush=True,
        )


def main(names):
    conf = fixtures.configure()
    log = tempfile.NamedTemporaryFile(prefix="request-floor-", suffix=".log")
    conf.set_override("log_file", log.name)
    startup.setup_logging(conf)
    if names == ["--parts"]:
        parts(conf)
        return
    with fixtures.database("mysql") as db:
        app = deploy.build_app(conf, db=db, sync_schema=False)
        small_reads_ab._seed(app)
        for name in names or CUTS:
            swaps = CUTS[name]
            for path in PATHS:
                found = {"before": [], "after": []}
                bodies = {}
                try:
                    for batch in range(BATCHES + 1):
                        for way in found:
                            _setup(way, swaps)
                            start = time.process_time()
                            for _ in range(BATCH):
                                status, body = profile_request.call(app, path, "1.39")
                                assert status.startswith("200"), status
                            bodies[way] = body
                            if batch:
                                found[way].append(
                                    (time.process_time() - start) / BATCH * 1e6
                                )
                finally:
                    _setup("after", swaps)
                assert bodies["before"] == bodies["after"], bodies
                before, after = (statistics.median(found[w]) for w in found)
                print(
                    "%-12s GET %s: before %.1f us (min %.1f), after %.1f us "
                    "(min %.1f), ratio %.3f"
                    % (
                        name,
                        "/" if path == "/" else "/resource_providers/{uuid}",
                        before,
                        min(found["before"]),
                        after,
                        min(found["after"]),
                        after / before,
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main(sys.argv[1:])
