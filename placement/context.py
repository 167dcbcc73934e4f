"""The request context: who is calling, and with which request id."""

from oslo_context import context

from placement import policy

# What oslo.context's ``from_environ`` reads each value from, the first
# key present winning.
_ENVIRON_HEADERS = context._ENVIRON_HEADERS
# The request's ids: given by the request id layer, not read here.
_IDS = ("request_id", "global_request_id")
# Every other attribute's environ keys: key -> (attribute, its rank among
# the attribute's keys; the first present wins).
_KEYS = {
    key: (name, rank)
    for name, keys in _ENVIRON_HEADERS.items()
    if name not in _IDS
    for rank, key in enumerate(keys)
}

# A new context's attributes (``of_request``), copied from the first one.
_BLANK: dict | None = None


class RequestContext(context.RequestContext):
    """Identity and request id, plus the database the request uses and the
    app's policy enforcer."""

    def __init__(self, *args, db=None, enforcer=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.db = db
        self.enforcer = enforcer

    def identify(self, environ, roles, db, enforcer):
        """Fill in, from the identity headers auth left in ``environ``,
        what ``from_environ(environ, roles=roles, db=db,
        enforcer=enforcer)`` would give a new context: the request id
        layer's context (made first, so that every log line carries the
        request's ids) becomes the request's whole context, one per
        request rather than two. It is left the thread's current one."""
        # Only the keys the request has, not every key looked for (a
        # tenth of a small request's layers).
        best = {}
        for key in _KEYS.keys() & environ.keys():
            name, rank = _KEYS[key]
            if best.get(name, (rank + 1,))[0] > rank:
                best[name] = (rank, environ[key])
        for name, (_, value) in best.items():
            setattr(self, name, value)
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

    def can(self, rule, target=None):
        policy.authorize(self, rule, target)


def of_request(request_id: str, global_request_id: str | None) -> RequestContext:
    """``RequestContext(request_id=request_id,
    global_request_id=global_request_id)``, left the thread's current
    context, its attributes copied from a first one's: oslo.context's
    ``__init__`` sets some thirty one by one (5-7% of ``GET /`` in
    process)."""
    global _BLANK
    if _BLANK is None:
        _BLANK = dict(vars(RequestContext(request_id="-")))
    made = RequestContext.__new__(RequestContext)
    made.__dict__.update(_BLANK)
    made.roles = []
    made.service_roles = []
    made.request_id = request_id
    made.global_request_id = global_request_id
    made.update_store()
    return made
