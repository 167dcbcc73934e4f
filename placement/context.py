"""The request context: who is calling, and with which request id."""

from oslo_context import context

from placement import policy


class RequestContext(context.RequestContext):
    """Identity and request id, plus the database the request uses and the
    app's policy enforcer."""

    def __init__(self, *args, db=None, enforcer=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.db = db
        self.enforcer = enforcer

    def can(self, rule, target=None):
        policy.authorize(self, rule, target)
