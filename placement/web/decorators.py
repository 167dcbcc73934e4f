"""Handler decorators for the checks that come before a handler's body:
version gate (404), Accept (406) and Content-Type (415). Stack them in the
order upstream checks them for the operation (it decides which error wins,
doc/api.md "Request rules"); the outermost runs first.
"""

import functools
from typing import Any
from typing import Callable

from placement.versions import Version
from placement.web import errors

Handler = Callable[..., Any]


def versioned(
    first: Version, before: Version | None = None, method_not_allowed: bool = False
) -> Callable[[Handler], Handler]:
    """From ``first`` up to (not including) ``before``, both names of
    ``placement.versions``; outside, a 404, or with ``method_not_allowed``
    a 405 without an Allow header."""

    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(req, resp, **kw):
            if not req.context.version.within(first, before):
                if method_not_allowed:
                    raise errors.MethodNotAllowed(req.method)
                raise errors.NotFound()
            return fn(req, resp, **kw)

        wrapper.first, wrapper.before = first, before
        return wrapper

    return decorator


def by_version(*handlers: Handler) -> Callable[[Handler], Handler]:
    """One route+method served by different handlers per version range.

    Decorates the route's function, whose name and docstring name the
    operation (its body is not run). Each handler must be ``versioned``;
    none matching is a 404.
    """

    def decorator(fn):
        @functools.wraps(fn)
        def dispatch(req, resp, **kw):
            for handler in handlers:
                if req.context.version.within(handler.first, handler.before):
                    return handler(req, resp, **kw)
            raise errors.NotFound()

        dispatch.variants = handlers
        return dispatch

    return decorator


def accepts_json(fn: Handler) -> Handler:
    """406 unless the client accepts application/json."""

    @functools.wraps(fn)
    def wrapper(req, resp, **kw):
        accept = req.get_header("Accept")
        if not errors.accepts(accept, "application/json"):
            raise errors.NotAcceptable(
                "Only application/json is provided", accept=accept
            )
        return fn(req, resp, **kw)

    return wrapper


def consumes_json(fn: Handler) -> Handler:
    """415 unless the body is declared application/json."""

    @functools.wraps(fn)
    def wrapper(req, resp, **kw):
        content_type = req.get_header("Content-Type")
        media = (content_type or "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise errors.UnsupportedMediaType(content_type)
        return fn(req, resp, **kw)

    return wrapper
