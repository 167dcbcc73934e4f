"""HTTP errors and the contract's JSON error body.

Handlers raise these; the app's error handler renders them. ``vary=False``
marks errors the contract says are produced outside the handler proper
(policy 403, lookup 404s that propagate) and so carry no ``vary`` header.
"""
import http

import orjson

from placement.api import microversion

UNDEFINED_CODE = "placement.undefined_code"
CODE_SINCE = microversion.Version(1, 23)

INVENTORY_INUSE = "placement.inventory.inuse"
CONCURRENT_UPDATE = "placement.concurrent_update"
DUPLICATE_NAME = "placement.duplicate_name"
PROVIDER_IN_USE = "placement.resource_provider.inuse"
PROVIDER_CANNOT_DELETE_PARENT = "placement.resource_provider.cannot_delete_parent"
PROVIDER_NOT_FOUND = "placement.resource_provider.not_found"
QUERY_DUPLICATE_KEY = "placement.query.duplicate_key"
QUERY_BAD_VALUE = "placement.query.bad_value"
QUERY_MISSING_VALUE = "placement.query.missing_value"

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
}


class PlacementError(Exception):
    status = 500

    def __init__(self, message="", code=None, vary=True, headers=None,
                 lead_in=None):
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
    def title(self):
        return http.HTTPStatus(self.status).phrase

    def detail(self):
        lead = self.lead_in or _EXPLANATION.get(self.status, self.title)
        return "%s\n\n %s  " % (lead, self.message)


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
            **kw)


class NotAcceptable(PlacementError):
    status = 406

    def __init__(self, message, accept=None, **kw):
        super().__init__(
            message,
            lead_in="The resource could not be generated that was acceptable "
                    "to your browser (content of type %s. " % accept, **kw)


class Conflict(PlacementError):
    status = 409


class UnsupportedMediaType(PlacementError):
    status = 415

    def __init__(self, content_type, **kw):
        super().__init__(
            "The media type %s is not supported, use application/json"
            % content_type,
            lead_in="The request media type %s is not supported by this "
                    "server. " % content_type, **kw)


class InternalError(PlacementError):
    status = 500


def error_body(error, request_id, version):
    """The contract's ``{"errors": [...]}`` document as bytes."""
    item = {"status": error.status, "title": error.title,
            "detail": error.detail(), "request_id": request_id}
    if error.versioned and version is not None and version >= CODE_SINCE:
        item["code"] = error.code or UNDEFINED_CODE
    item.update(error.extra)
    return orjson.dumps({"errors": [item]})
