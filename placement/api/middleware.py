"""WSGI layers outside the falcon app: request id, noauth2, context.

They are plain WSGI so that keystonemiddleware and oslo.middleware's CORS
slot in between them in the order doc/architecture.md "Request path"
gives (it decides which error a client sees first).
"""

import logging
import os
import re
import time
import urllib.parse
from typing import Any

import orjson

from placement import context as placement_context
from placement import logformat

LOG = logging.getLogger("placement.requestlog")

REQUEST_ID_ENV = "placement.request_id"
GLOBAL_REQUEST_ID_ENV = "placement.global_request_id"
CONTEXT_ENV = "placement.context"
# The microversion the answer's OpenStack-API-Version header names ("1.39"),
# left by the app when it sets the header (``app.VersionMiddleware``): the
# metrics and the log line read it here rather than each looking through
# the answer's headers.
VERSION_ENV = "placement.answered_version"
_ID_HEADER = "x-openstack-request-id"
_GLOBAL_ID = re.compile(
    r"^req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)


def new_request_id() -> str:
    """``req-`` and a random (version 4) UUID, as ``uuid.uuid4()`` writes
    it, from the same 16 random bytes, in less than half its time."""
    h = os.urandom(16).hex()
    return "req-%s-%s-4%s-%s%s-%s" % (
        h[:8],
        h[8:12],
        h[13:16],
        "89ab"[int(h[16], 16) & 3],
        h[17:20],
        h[20:],
    )


class RequestIdMiddleware:
    """Gives every request a ``req-<uuid4>`` id, echoed on every response,
    defaults Accept to JSON and writes one log line per request."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        request_id = new_request_id()
        environ[REQUEST_ID_ENV] = request_id
        inbound = environ.get("HTTP_X_OPENSTACK_REQUEST_ID", "")
        if _GLOBAL_ID.match(inbound):
            environ[GLOBAL_REQUEST_ID_ENV] = inbound
        # oslo.log takes the ids and user of a line from the thread's
        # current context: without this, requests that never get a full
        # one (401, /healthcheck, /metrics) would log the previous
        # request's. ContextMiddleware fills in its identity.
        environ[CONTEXT_ENV] = placement_context.of_request(
            request_id, environ.get(GLOBAL_REQUEST_ID_ENV)
        )
        accept = environ.get("HTTP_ACCEPT")
        if not accept or accept.strip() == "*/*":
            environ["HTTP_ACCEPT"] = "application/json"
        started = time.monotonic()
        seen = {}

        def _start_response(status, headers, exc_info=None):
            # One pass: the inner layers' request id dropped (ours is the
            # one), the length kept for the log line.
            kept = []
            for header in headers:
                name = header[0].lower()
                if name == "content-length":
                    seen["length"] = header[1]
                elif name == _ID_HEADER:
                    continue
                kept.append(header)
            kept.append((_ID_HEADER, request_id))
            seen["status"] = status
            seen["version"] = environ.get(VERSION_ENV, "-")
            return start_response(status, kept, exc_info)

        try:
            body = self.app(environ, _start_response)
        except Exception:
            # The server answers 500 for whatever escapes; log it as such.
            seen.setdefault("status", "500")
            raise
        finally:
            if LOG.isEnabledFor(logging.INFO):
                log_request(environ, seen, started, request_id)
        return body


_LINE = (
    '%s "%s %s" status: %s len: %s microversion: %s asked: %s time: %.6f request_id: %s'
)


# What urllib.parse.quote leaves as it is with logged_path's safe
# characters: such a path is logged without quoting.
_AS_IS = re.compile(r"[A-Za-z0-9_.~/:@!$&'()*+,;=%-]*")


def logged_path(environ: dict[str, Any]) -> str:
    """The request's path and query as the log line shows them."""
    path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    if not _AS_IS.fullmatch(path):
        # WSGI paths are latin-1 decoded bytes: log them percent-encoded
        # as the client sent them, like the query string.
        path = urllib.parse.quote(
            path.encode("latin-1", "replace"), safe="/:@!$&'()*+,;=-._~%"
        )
    if environ.get("QUERY_STRING"):
        path += "?" + environ["QUERY_STRING"]
    return path


def log_request(
    environ: dict[str, Any], seen: dict[str, Any], started: float, request_id: str
) -> None:
    """The request's INFO line on ``placement.requestlog``; ``seen``: the
    answer's status, length and microversion (``VERSION_ENV``) when it
    was started."""
    path = logged_path(environ)
    args = (
        environ.get("REMOTE_ADDR", "-"),
        environ.get("REQUEST_METHOD"),
        path,
        (seen.get("status") or "-").split(" ", 1)[0],
        seen.get("length", "0"),
        seen.get("version", "-"),
        _asked(environ),
        time.monotonic() - started,
        request_id,
    )
    logformat.log(LOG, logging.INFO, _LINE, args)


# _asked's answers by header; a client sends few different ones.
_ASKED: dict[str, str] = {}
_ASKED_MAX = 64


def _asked(environ):
    """The microversion the request asked for (whatever the answer): its
    OpenStack-API-Version for placement, or ``-``."""
    header = environ.get("HTTP_OPENSTACK_API_VERSION", "")
    asked = _ASKED.get(header)
    if asked is None:
        asked = header.strip()
        if asked.lower().startswith("placement "):
            asked = asked[len("placement ") :].strip()
        asked = "".join(asked.split()) or "-"
        if len(_ASKED) >= _ASKED_MAX:
            _ASKED.clear()
        _ASKED[header] = asked
    return asked


def _unauthorized(start_response, message):
    body = orjson.dumps(
        {"message": message, "code": "401 Unauthorized", "title": "Unauthorized"}
    )
    start_response(
        "401 Unauthorized",
        [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
    )
    return [body]


_IDENTITY_HEADERS = (
    "HTTP_X_USER_ID",
    "HTTP_X_PROJECT_ID",
    "HTTP_X_TENANT_ID",
    "HTTP_X_ROLES",
    "HTTP_X_IDENTITY_STATUS",
)


class NoAuthMiddleware:
    """noauth2: ``X-Auth-Token: user[:project]`` is trusted as given.

    The token's parts only fill in what the client did not send: an
    ``X-User-Id``, ``X-Project-Id`` or ``X-Tenant-Id`` header wins, as it
    does when oslo.context builds a context from the environment.
    """

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == "/":
            return self.app(environ, start_response)
        token = environ.get("HTTP_X_AUTH_TOKEN")
        if not token:
            return _unauthorized(
                start_response,
                "This server could not verify that you are authorized to "
                "access the document you requested. Either you supplied the "
                "wrong credentials (e.g., bad password), or your browser does "
                "not understand how to supply the credentials required.",
            )
        user, _, project = token.partition(":")
        project = project or user
        if "HTTP_X_ROLES" in environ:
            roles = environ["HTTP_X_ROLES"]
        else:
            roles = "admin" if user == "admin" else ""
        environ.setdefault("HTTP_X_USER_ID", user)
        environ["HTTP_X_ROLES"] = roles
        environ["HTTP_X_IDENTITY_STATUS"] = "Confirmed"
        if "HTTP_OPENSTACK_SYSTEM_SCOPE" in environ:
            environ.pop("HTTP_X_PROJECT_ID", None)
            environ.pop("HTTP_X_TENANT_ID", None)
        elif "HTTP_X_PROJECT_ID" not in environ and "HTTP_X_TENANT_ID" not in environ:
            environ["HTTP_X_PROJECT_ID"] = project
        return self.app(environ, start_response)


class ContextMiddleware:
    """Fills in the request's RequestContext (RequestIdMiddleware's) from
    the identity headers auth left, as oslo.context's ``from_environ``
    reads them: ``X-User-Id`` (else ``X-User``) is the user,
    ``X-Project-Id`` (else ``X-Tenant-Id``) the project."""

    def __init__(self, app, db, enforcer):
        self.app = app
        self.db = db
        self.enforcer = enforcer

    def __call__(self, environ, start_response):
        user_id = environ.get("HTTP_X_USER_ID") or environ.get("HTTP_X_USER")
        if not user_id and environ.get("PATH_INFO") not in ("/", ""):
            return _unauthorized(start_response, "Unauthorized")
        roles = [
            r.strip() for r in environ.get("HTTP_X_ROLES", "").split(",") if r.strip()
        ]
        context = environ.get(CONTEXT_ENV)
        if context is None:
            # No request id layer in front (a test's pipeline).
            context = environ[CONTEXT_ENV] = placement_context.RequestContext(
                request_id=environ.get(REQUEST_ID_ENV),
                global_request_id=environ.get(GLOBAL_REQUEST_ID_ENV),
            )
        context.identify(environ, roles, self.db, self.enforcer)
        return self.app(environ, start_response)
