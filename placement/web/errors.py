"""HTTP errors and the JSON error body (doc/api.md "Errors").

Handlers raise these; the app's error handler renders them. ``vary=False``
marks errors that upstream produces outside the handler proper
(policy 403, lookup 404s that propagate) and so carry no ``vary`` header.
"""

import html
import http
import re

import orjson
from webob import acceptparse

from placement import error_codes
from placement import exception
from placement import versions
from placement.versions import Version

_EXPLANATION = {
    400: "The server could not comply with the request since it is either "
    "malformed or otherwise incorrect.",
    401: "This server could not verify that you are authorized to access the "
    "document you requested.",
    403: "Access was denied to this resource.",
    404: "The resource could not be found.",
    409: "There was a conflict when trying to complete your request.",
    500: "The server has either erred or is incapable of performing the "
    "requested operation.",
    503: "The server is currently unavailable. Please try again at a later time.",
}


# Error texts quote what the client sent (schema failures show the value).
# A quoted literal longer than LONG_LITERAL keeps only its first KEPT
# characters, and a whole text longer than MAX_TEXT (far more than any
# ordinary error, schema fragment included) is cut there: a 20 MB name
# must not come back in the 400. Ordinary texts are left exactly as they are.
LONG_LITERAL = 256
KEPT = 64
MAX_TEXT = 8192
# A quoted literal, either quote; runs of ordinary characters are taken
# whole so that a text of megabytes is scanned at C speed.
_QUOTED = re.compile(
    "|".join(r"{0}[^{0}\\]*(?:\\.[^{0}\\]*)*{0}".format(q) for q in "'\"")
)


def _cut(match):
    literal = match.group()
    if len(literal) <= LONG_LITERAL:
        return literal
    return literal[: KEPT + 1] + "..." + literal[0]


def shorten(text: str) -> str:
    """``text`` with long quoted values and any excess length cut."""
    if len(text) <= LONG_LITERAL:
        return text
    text = _QUOTED.sub(_cut, text)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "..."
    return text


class PlacementError(Exception):
    status = 500

    def __init__(self, message="", code=None, vary=True, headers=None, lead_in=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.vary = vary
        self.headers = headers or {}
        self.lead_in = lead_in
        # Errors raised before version negotiation (or by it) have no
        # version to report and never a 'code'.
        self.versioned = True
        self.extra = {}

    @property
    def title(self) -> str:
        return http.HTTPStatus(self.status).phrase

    @property
    def explanation(self) -> str:
        return self.lead_in or _EXPLANATION.get(self.status, self.title)

    def detail(self) -> str:
        return "%s\n\n %s  " % (shorten(self.explanation), shorten(self.message))


class BadRequest(PlacementError):
    status = 400


class Forbidden(PlacementError):
    status = 403


class NotFound(PlacementError):
    status = 404


class MethodNotAllowed(PlacementError):
    status = 405

    def __init__(self, method, allowed=None, **kw):
        headers = {"Allow": ", ".join(allowed)} if allowed else {}
        super().__init__(
            "The method specified is not allowed for this resource.",
            headers=headers,
            lead_in="The method %s is not allowed for this resource. " % method,
            **kw,
        )


class NotAcceptable(PlacementError):
    status = 406

    def __init__(self, message, accept=None, **kw):
        super().__init__(
            message,
            lead_in="The resource could not be generated that was acceptable "
            "to your browser (content of type %s. " % accept,
            **kw,
        )


class Conflict(PlacementError):
    status = 409


class UnsupportedMediaType(PlacementError):
    status = 415

    def __init__(self, content_type, **kw):
        super().__init__(
            "The media type %s is not supported, use application/json" % content_type,
            lead_in="The request media type %s is not supported by this "
            "server. " % content_type,
            **kw,
        )


class RequestTooLarge(PlacementError):
    status = 413


class InternalError(PlacementError):
    status = 500


class ServiceUnavailable(PlacementError):
    status = 503


_FROM_DOMAIN = {400: BadRequest, 403: Forbidden, 404: NotFound, 409: Conflict}


def from_domain(exc: exception.PlacementException) -> "PlacementError":
    """The PlacementError a domain exception (``placement.exception``)
    becomes when no handler words it: lookups (404) and policy (403) fail
    before the handler's own work and carry no ``vary``."""
    cls = _FROM_DOMAIN.get(exc.status, InternalError)
    vary = not isinstance(exc, (exception.NotFound, exception.PolicyNotAuthorized))
    return cls(exc.message, code=exc.code, vary=vary)


def error_body(
    error: PlacementError, request_id: str | None, version: Version | None
) -> bytes:
    """The ``{"errors": [...]}`` document as bytes."""
    item = {
        "status": error.status,
        "title": error.title,
        "detail": error.detail(),
        "request_id": request_id,
    }
    if error.versioned and version is not None and version >= versions.ERROR_CODES:
        item["code"] = error.code or error_codes.UNDEFINED_CODE
    item.update(error.extra)
    return orjson.dumps({"errors": [item]})


def server_answer(status: int, message: str) -> bytes:
    """The ``{"errors": [...]}`` document of a request the HTTP server
    answers before the app has it (a head it cannot parse, a body that
    came too late): no request id, no microversion."""
    error = PlacementError(message, vary=False)
    error.status = status
    error.versioned = False
    return error_body(error, None, None)


# What accepts() answered, by (Accept header, media type): clients send
# the same one or two headers on every request, and webob's parse was a
# tenth of a small request's own CPU. Forgotten all at once past
# _ACCEPTED_MAX; headers longer than _ACCEPTED_LENGTH are not kept.
_ACCEPTED: dict[tuple[str, str], bool] = {}
_ACCEPTED_MAX = 256
_ACCEPTED_LENGTH = 256


def accepts(accept: str | None, media_type: str) -> bool:
    """Whether an ``Accept`` header admits ``media_type``. An absent or
    unparseable header admits anything."""
    if not accept:
        return True
    key = (accept, media_type)
    found = _ACCEPTED.get(key)
    if found is None:
        found = _parsed_accepts(accept, media_type)
        if len(accept) <= _ACCEPTED_LENGTH:
            if len(_ACCEPTED) >= _ACCEPTED_MAX:
                _ACCEPTED.clear()
            _ACCEPTED[key] = found
    return found


def _parsed_accepts(accept: str, media_type: str) -> bool:
    try:
        header = acceptparse.create_accept_header(accept)
        if not isinstance(header, acceptparse.AcceptValidHeader):
            return True
        return bool(header.acceptable_offers([media_type]))
    except Exception:
        return True


JSON = "application/json"
HTML = "text/html; charset=UTF-8"
TEXT = "text/plain; charset=UTF-8"

_HTML_PAGE = """<html>
 <head>
  <title>%(status)s</title>
 </head>
 <body>
  <h1>%(status)s</h1>
  %(explanation)s<br /><br />
%(message)s
 </body>
</html>"""


def render(
    error: PlacementError,
    accept: str | None,
    request_id: str | None,
    version: Version | None,
) -> tuple[str, bytes]:
    """(content type, body bytes) of ``error`` for the client's Accept:
    the JSON document when JSON is acceptable, else an HTML page when
    text/html is, else plain text."""
    if accepts(accept, "application/json"):
        return JSON, error_body(error, request_id, version)
    status = "%d %s" % (error.status, error.title)
    if accepts(accept, "text/html"):
        page = _HTML_PAGE % {
            "status": status,
            "explanation": html.escape(error.explanation, quote=False),
            "message": html.escape(error.message, quote=False),
        }
        return HTML, page.encode()
    text = "%s\n\n%s\n\n %s" % (status, error.explanation, error.message)
    return TEXT, text.encode()
