"""Domain exceptions raised by the object layer.

Each carries the HTTP status and error code it maps to when a handler lets
it through unchanged; handlers catch one only where the API words or
codes it differently for that endpoint (``placement.web.errors.from_domain``
maps the rest). An uncaught ``NotFound`` is a 404 raised by a lookup before
the handler's own work: generic code, no ``vary`` (doc/api.md "Errors").
"""

from placement import error_codes


class PlacementException(Exception):
    status = 400
    code: str | None = None

    def __init__(self, message="", code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class NotFound(PlacementException):
    status = 404


class ResourceProviderNotFound(NotFound):
    pass


class ResourceClassNotFound(NotFound):
    pass


class TraitNotFound(NotFound):
    """``names``: the unknown trait names, sorted, for handlers that word
    their own message."""

    def __init__(self, names):
        self.names = sorted(names)
        super().__init__("No such trait(s): %s." % ", ".join(self.names))


class ConsumerNotFound(NotFound):
    pass


class BadRequest(PlacementException):
    status = 400


class AnswerTooLarge(BadRequest):
    code = error_codes.QUERY_ANSWER_TOO_LARGE


class Conflict(PlacementException):
    status = 409


class ConcurrentUpdate(Conflict):
    code = error_codes.CONCURRENT_UPDATE


class Exists(Conflict):
    pass


class DuplicateName(Conflict):
    code = error_codes.DUPLICATE_NAME


class InventoryInUse(Conflict):
    code = error_codes.INVENTORY_INUSE


class ResourceProviderInUse(Conflict):
    code = error_codes.PROVIDER_IN_USE


class CannotDeleteParent(Conflict):
    code = error_codes.PROVIDER_CANNOT_DELETE_PARENT


class ResourceClassInUse(Conflict):
    pass


class TraitInUse(Conflict):
    pass


class ObjectActionError(BadRequest):
    """An object refused a create/update; handlers prefix what was acted on."""

    def __init__(self, action, reason):
        super().__init__("Object action %s failed because: %s" % (action, reason))


class PolicyNotAuthorized(PlacementException):
    """The caller's roles do not allow the operation; raised before the
    handler's own work, so the 403 carries no ``vary``."""

    status = 403
