"""The request body size limit: ``[oslo_middleware] max_request_body_size``
(oslo.middleware's option), answered 413 with the contract's JSON error
body before any of the body is read.

Only ``Content-Length`` needs checking: the app reads a body through a
stream bounded by that header, so a body sent without one (chunked) is
never read at all.
"""

from placement.api import middleware
from placement.web import errors


class SizeLimitMiddleware:
    def __init__(self, app, limit):
        self.app = app
        self.limit = limit

    def __call__(self, environ, start_response):
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            # Not a number: the app answers its own 400 for that.
            length = 0
        if length <= self.limit:
            return self.app(environ, start_response)
        error = errors.RequestTooLarge(
            "Request is too large: %d bytes, larger than max_request_body_size "
            "(%d)." % (length, self.limit),
            vary=False,
        )
        error.versioned = False
        body = errors.error_body(error, environ.get(middleware.REQUEST_ID_ENV), None)
        start_response(
            "413 Request Entity Too Large",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]
