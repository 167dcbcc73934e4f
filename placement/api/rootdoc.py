"""``GET /``, the version document, answered in front of falcon.

Its answer is the same for every request but for the version asked, and
falcon's request, routing and response were about a fifth of its cost
(tools/bench/README, issue 45, "the version document before falcon").
This layer sits where falcon's app did (inside the context layer), so
everything outside it (request id, log line, metrics, CORS, auth) is as
before; it answers what falcon answers, header for header
(``tests/unit/test_rootdoc.py``), and only the plain case: a GET of
``/`` (or the empty path of a prefix mount) without a body and with no
or a valid version header. Anything else (HEAD, which the app answers
405, other methods, a Content-Length, a bad version) goes to falcon.
"""

from placement.api import metrics
from placement.api import middleware
from placement.handlers import root
from placement.web import microversion
from placement.web import request

_PATHS = ("/", "")
_LENGTH = str(len(root.DOCUMENT))
_REFUSED = (microversion.InvalidVersion, microversion.UnacceptableVersion)
# By the version header asked: the version shown and the answer's headers,
# made again when "now" (their Last-Modified) is another second. Clients
# send few different headers; a refused one is not kept.
_KEPT: dict[str, tuple[str, str, list[tuple[str, str]]]] = {}
_KEPT_MAX = 64


class VersionDocument:
    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        if (
            environ.get("REQUEST_METHOD") != "GET"
            or environ.get("PATH_INFO", "") not in _PATHS
            or environ.get("CONTENT_LENGTH")
        ):
            return self.app(environ, start_response)
        asked = environ.get("HTTP_OPENSTACK_API_VERSION", "")
        now = request.http_now()
        kept = _KEPT.get(asked)
        if kept is None or kept[0] != now:
            try:
                version = microversion.extract_version(asked)
            except _REFUSED:
                return self.app(environ, start_response)
            shown = str(version)
            # In falcon's order: the handler's, the version's, the length.
            headers = [
                ("content-type", "application/json"),
                *request.caching_headers(version, None, always=True),
                ("openstack-api-version", microversion.answered(shown)),
                ("vary", microversion.VARY),
                ("content-length", _LENGTH),
            ]
            if len(_KEPT) >= _KEPT_MAX:
                _KEPT.clear()
            kept = _KEPT[asked] = (now, shown, headers)
        # What VersionMiddleware leaves for the metrics and the log line.
        environ[metrics.ROUTE_ENV] = "/"
        environ[middleware.VERSION_ENV] = kept[1]
        start_response("200 OK", list(kept[2]))
        return [root.DOCUMENT]
