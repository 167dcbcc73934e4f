"""Handler decorators for the checks that come before a handler's body:
version gate (404), Accept (406) and Content-Type (415). Stack them in the
order upstream checks them for the operation (it decides which error wins,
doc/api.md "Request rules"); the outermost runs first.
"""

import functools

from placement.api import errors
from placement.api import microversion


def versioned(min_version, max_version=None):
    """404 outside [min_version, max_version]."""
    lo = microversion.Version.parse(min_version)
    hi = microversion.Version.parse(max_version) if max_version else None

    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(req, resp, **kw):
            if not req.context.version.matches(lo, hi):
                raise errors.NotFound()
            return fn(req, resp, **kw)

        wrapper.min_version, wrapper.max_version = lo, hi
        return wrapper

    return decorator


def by_version(*handlers):
    """One route+method served by different handlers per version range.

    Each handler must be ``versioned``; none matching is a 404.
    """

    def dispatch(req, resp, **kw):
        for fn in handlers:
            if req.context.version.matches(fn.min_version, fn.max_version):
                return fn(req, resp, **kw)
        raise errors.NotFound()

    dispatch.variants = handlers
    return dispatch


def accepts_json(fn):
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


def consumes_json(fn):
    """415 unless the body is declared application/json."""

    @functools.wraps(fn)
    def wrapper(req, resp, **kw):
        content_type = req.get_header("Content-Type")
        media = (content_type or "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise errors.UnsupportedMediaType(content_type)
        return fn(req, resp, **kw)

    return wrapper
