"""The falcon application and the full WSGI pipeline around it."""

import dataclasses
import logging
from typing import Any
from typing import Callable

import falcon
from oslo_config import cfg
from oslo_middleware import http_proxy_to_wsgi

from placement import error_codes
from placement import events
from placement import exception
from placement import policy
from placement import versions
from placement.api import capacity_gauges
from placement.api import console
from placement.api import healthcheck
from placement.api import metrics
from placement.api import middleware
from placement.api import openapi
from placement.api import rootdoc
from placement.api import routes
from placement.api import sizelimit
from placement.db import api as db_api
from placement.db import errors as db_errors
from placement.db import sqlite_file
from placement.web import errors
from placement.web import microversion

LOG = logging.getLogger(__name__)
# What a 503 for an unreachable database asks clients to wait: about as
# long as a database restart or fail-over takes to begin answering.
RETRY_AFTER_SECONDS = 5


class VersionMiddleware:
    """Microversion negotiation, the dispatcher's body sanity check, and the
    version headers on the way out (doc/architecture.md "Request path",
    "Microversions")."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.ctx = req.env.get(middleware.CONTEXT_ENV)
        req.context.in_handler = False
        # The server folds repeated header lines into one environ value.
        header = req.env.get("HTTP_OPENSTACK_API_VERSION", "")
        try:
            req.context.version = microversion.extract_version(header)
        except microversion.InvalidVersion as e:
            raise _unversioned(errors.BadRequest("Invalid microversion: %s" % e))
        except microversion.UnacceptableVersion as e:
            error = _unversioned(
                errors.NotAcceptable(
                    "Invalid microversion: %s" % e, accept=req.env.get("HTTP_ACCEPT")
                )
            )
            error.extra = {
                "max_version": str(versions.MAX),
                "min_version": str(versions.MIN),
            }
            raise error
        _check_body_headers(req.env)

    def process_response(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        resource: Any,
        req_succeeded: bool,
    ) -> None:
        req.env[metrics.ROUTE_ENV] = req.uri_template
        version = req.context.get("version")
        if version is None or resp.context.get("unversioned"):
            return
        shown = str(version)
        resp.set_header("openstack-api-version", microversion.answered(shown))
        req.env[middleware.VERSION_ENV] = shown
        if resp.context.get("vary", req.context.get("in_handler")):
            resp.set_header("vary", microversion.VARY)


def _unversioned(error):
    error.versioned = False
    return error


def _check_body_headers(env):
    length = env.get("CONTENT_LENGTH")
    if length in (None, ""):
        return
    try:
        length = int(length)
    except ValueError:
        raise errors.BadRequest("content-length header must be an integer", vary=False)
    if length > 0 and not env.get("CONTENT_TYPE"):
        raise errors.BadRequest(
            "content-type header required when content-length > 0", vary=False
        )


def _render_error(req, resp, error):
    version = req.context.get("version")
    resp.status = error.status
    resp.content_type, resp.data = errors.render(
        error, req.get_header("Accept"), req.env.get(middleware.REQUEST_ID_ENV), version
    )
    for name, value in error.headers.items():
        resp.set_header(name, value)
    if error.status == 409 and error.code == error_codes.CONCURRENT_UPDATE:
        events.generation_conflict()
    if not error.versioned:
        resp.context.unversioned = True
    resp.context.vary = error.vary and req.context.get("in_handler", False)


def handle_placement_error(
    req: falcon.Request, resp: falcon.Response, ex: errors.PlacementError, params: Any
) -> None:
    _render_error(req, resp, ex)


def handle_domain_error(
    req: falcon.Request,
    resp: falcon.Response,
    ex: exception.PlacementException,
    params: Any,
) -> None:
    _render_error(req, resp, errors.from_domain(ex))


def handle_falcon_error(
    req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError, params: Any
) -> None:
    error: errors.PlacementError
    if isinstance(ex, falcon.HTTPNotFound):
        error = errors.NotFound(vary=False)
    elif isinstance(ex, falcon.HTTPMethodNotAllowed):
        error = errors.MethodNotAllowed(req.method)
    else:
        error = errors.PlacementError(ex.description or ex.title, vary=False)
        error.status = int(str(ex.status).split()[0])
    _render_error(req, resp, error)


# The error answered, of the request id and the exception.
Answer = Callable[[str | None, BaseException], errors.PlacementError]


@dataclasses.dataclass(frozen=True)
class Unexpected:
    """How ``handle_unexpected`` logs and answers one kind of exception."""

    matches: Callable[[BaseException], bool]
    level: int  # of the log line
    log: str  # what the log line says happened
    answer: Answer
    quote: bool = True  # the exception's text in the log line
    traceback: bool = False  # and its traceback


def _bad_request(message: str) -> Answer:
    return lambda request_id, ex: errors.BadRequest(message, vary=False)


def _retry_later(message: str) -> Answer:
    """A 503 saying ``message`` (``%s``: the request id) and how long to
    wait before trying again."""
    return lambda request_id, ex: errors.ServiceUnavailable(
        message % request_id,
        vary=False,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def _row_gone(name: str | None, request_id: str | None) -> errors.PlacementError:
    """The 409 of a write that found a row it relies on gone, naming
    what the database said is missing (a column or key) when it did."""
    return errors.Conflict(
        "A row this write relies on was removed or renumbered by another "
        "writer meanwhile%s: nothing was written; read again and retry, "
        "request id %s." % (" (%s)" % name if name else "", request_id),
        code=error_codes.CONCURRENT_UPDATE,
    )


# The first row whose ``matches`` is true answers.
UNEXPECTED = (
    # Rolled back whole; nothing to retry. A documented limit. The text
    # would list every parameter.
    Unexpected(
        db_errors.is_too_many_parameters,
        logging.INFO,
        "Too many items",
        _bad_request(
            "The request names too many items for one database statement "
            "(traits, providers, aggregates...): send it in smaller parts."
        ),
        quote=False,
    ),
    Unexpected(
        db_errors.is_unstorable_text,
        logging.WARNING,
        "Text the database cannot store",
        _bad_request(
            "The database cannot store or compare text of this request: "
            "its tables use a character set without some of its "
            "characters (not utf8mb4)."
        ),
    ),
    # Cancelled by the database and rolled back whole; a worker never
    # waits on a runaway statement for longer than the budget.
    Unexpected(
        db_errors.is_over_time_budget,
        logging.ERROR,
        "Database statement over its time budget",
        _retry_later(
            "A database statement of this request ran longer than the "
            "service allows; try again later, or ask for less at once "
            "(a limit, fewer items), request id %s."
        ),
    ),
    # A replica, a primary demoted by a fail-over, a Galera node set
    # read-only, a file the process may not write: reads still answer.
    # Nothing was written (the write's transaction is rolled back whole).
    Unexpected(
        db_errors.is_read_only,
        logging.WARNING,
        "Database refuses writes (read-only)",
        _retry_later(
            "The database refuses writes (it is read-only, e.g. during a "
            "fail-over or maintenance): nothing was written. Reads still "
            "work; try the write again later, request id %s."
        ),
    ),
    Unexpected(
        db_errors.is_full,
        logging.ERROR,
        "Database full",
        _retry_later(
            "The database has no room left for this write (its disk or a "
            "table is full): nothing was written; try again later, request "
            "id %s."
        ),
    ),
    Unexpected(
        db_errors.is_interrupted,
        logging.WARNING,
        "Database statement interrupted",
        _retry_later(
            "A database statement of this request was cancelled or killed "
            "(by an operator or the database); try "
            "again, request id %s."
        ),
    ),
    # Where no retry_on_deadlock wraps the transaction (or a read met
    # one): what the client does after a lost race is the same.
    Unexpected(
        db_errors.is_deadlock,
        logging.WARNING,
        "Database deadlock",
        lambda request_id, ex: errors.from_domain(
            exception.ConcurrentUpdate(db_api.DEADLOCKED)
        ),
    ),
    # The last resort for a write whose statement found a row it relies on
    # gone (a NULL where an id was to be read, a foreign key): another
    # writer removed or renumbered it (a restore, a hand-made change).
    # Rolled back whole; reading again and retrying is what a client does.
    Unexpected(
        db_errors.is_foreign_change,
        logging.WARNING,
        "Row gone under a write",
        lambda request_id, ex: _row_gone(db_errors.missing(ex), request_id),
    ),
    # Not something waiting fixes: the service must be restarted on the
    # file (no Retry-After). Nothing was written.
    Unexpected(
        sqlite_file.is_file_removed,
        logging.ERROR,
        "Database file removed",
        lambda request_id, ex: errors.ServiceUnavailable(
            "Database file removed or replaced under the running service: "
            "nothing is read or written until it is restarted on the "
            "configured file, request id %s." % request_id,
            vary=False,
        ),
    ),
    # Dropped under a running server, or never synced: as in an outage,
    # nothing the client did wrong and nothing half written.
    Unexpected(
        db_errors.is_schema_missing,
        logging.ERROR,
        "Database schema missing",
        _retry_later("The database schema is missing, request id %s."),
    ),
    # The one 503 after which something may have been written: say so.
    Unexpected(
        lambda ex: isinstance(ex, db_api.OutcomeUnknown),
        logging.ERROR,
        "Database lost at a write's COMMIT, outcome unknown",
        _retry_later(
            "The database went away while this write was being committed, "
            "and whether it was done could not be found out: read what it "
            "writes (its generation tells) before sending it again, request "
            "id %s."
        ),
    ),
    Unexpected(
        db_errors.is_unavailable,
        logging.ERROR,
        "Database unavailable",
        _retry_later("The database is unavailable, request id %s."),
    ),
    Unexpected(
        lambda ex: True,
        logging.ERROR,
        "Uncaught exception",
        lambda request_id, ex: errors.InternalError(
            "internal error, request id %s" % request_id, vary=False
        ),
        quote=False,
        traceback=True,
    ),
)


def handle_unexpected(
    req: falcon.Request, resp: falcon.Response, ex: Exception, params: Any
) -> None:
    """A database that is down or unreachable, refuses writes, is full,
    cancelled a statement or has lost its schema answers 503 with
    Retry-After; a deadlock 409; a request naming more items than one
    statement takes, or text the tables cannot hold, 400; anything else
    is a bug, a 500 (``UNEXPECTED``). No body quotes the exception: its text
    carries hosts, SQL and parameters, so it goes to the log alone (under
    the request id, which the body names)."""
    request_id = req.env.get(middleware.REQUEST_ID_ENV)
    row = next(row for row in UNEXPECTED if row.matches(ex))
    LOG.log(
        row.level,
        "%s in %s %s (%s)" + (": %s" if row.quote else ""),
        row.log,
        req.method,
        req.path,
        request_id,
        *((ex,) if row.quote else ()),
        exc_info=ex if row.traceback else None,
    )
    error = row.answer(request_id, ex)
    _render_error(req, resp, error)
    # The service's faults, not the request's, answer without the version
    # headers (their bodies still carry the error code).
    if error.status >= 500:
        resp.context.unversioned = True


def create_falcon_app() -> falcon.App:
    app = falcon.App(middleware=[VersionMiddleware()])
    app.req_options.strip_url_path_trailing_slash = False
    app.req_options.auto_parse_qs_csv = False
    # Bodies always set their own type; an empty 201 must carry none.
    app.resp_options.default_media_type = None  # type: ignore[assignment]
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(falcon.HTTPError, handle_falcon_error)
    app.add_error_handler(exception.PlacementException, handle_domain_error)
    app.add_error_handler(errors.PlacementError, handle_placement_error)
    routes.add_routes(app)
    return app


class OpenPaths:
    """Serves the operations endpoints (``/healthcheck``, ``/metrics``),
    ``/openapi.json`` and the console's static files (``/ui/...``) before
    CORS and auth: like ``/`` they need no token (the console's own API
    calls carry the operator's)."""

    def __init__(self, app, apps, console_app=None):
        self.app = app
        self.apps = apps
        self.console_app = console_app

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        app = self.apps.get(path, self.app)
        if self.console_app is not None and console.owns(path):
            app = self.console_app
        return app(environ, start_response)


def _capacity_gauges(conf, db):
    """The capacity gauges of ``[capacity] shapes``, or None."""
    shapes = capacity_gauges.parse_shapes(conf.capacity.shapes)
    if not shapes:
        return None
    # Started by the first scrape of each worker: a process that forks
    # workers must not hold the lock its children would inherit.
    return capacity_gauges.Gauges(db, shapes, conf.capacity.interval)


def build_pipeline(conf: cfg.ConfigOpts, db: db_api.Database) -> Any:
    """proxy headers -> request id -> tracing -> metrics -> body size
    limit -> open paths -> CORS -> auth -> context -> version document
    -> falcon app. The
    order decides which error a client sees first (doc/architecture.md
    "Request path"). ``db`` must be opened for ``conf``: the app reads no
    other."""
    if db.conf is not conf:
        raise ValueError("the database was opened for another configuration")
    app: Any = middleware.ContextMiddleware(
        rootdoc.VersionDocument(create_falcon_app()), db, policy.Enforcer(conf)
    )
    if conf.api.auth_strategy == "noauth2":
        app = middleware.NoAuthMiddleware(app)
    else:
        from placement.api import keystone

        app = keystone.wrap(app, conf)
    if conf.cors.allowed_origin if "cors" in conf else False:
        from placement.api import cors

        app = cors.wrap(app, conf)
    open_paths = {
        healthcheck.HEALTHCHECK_PATH: healthcheck.healthcheck_app(conf, db),
        metrics.METRICS_PATH: metrics.metrics_app(_capacity_gauges(conf, db)),
        openapi.OPENAPI_PATH: openapi.app,
    }
    app = OpenPaths(app, open_paths, console.app if conf.ui.enabled else None)
    app = sizelimit.SizeLimitMiddleware(app, conf.oslo_middleware.max_request_body_size)
    app = metrics.MetricsMiddleware(app, extra_paths=open_paths)
    # Only when enabled (osprofiler is optional), and inside the request
    # id: a trace's span covers everything the request costs after that.
    if conf.profiler.enabled:
        from placement.api import tracing

        app = tracing.Tracing(app, conf)
    app = middleware.RequestIdMiddleware(app)
    # Only when enabled: disabled, the middleware would still take every
    # request and response through webob for nothing.
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        app = http_proxy_to_wsgi.HTTPProxyToWSGI(app, conf)
    return app
