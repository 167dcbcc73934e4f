"""The policy engine (oslo.policy) and the authorise call handlers make.

Rules are the defaults of ``placement.policies`` plus overrides from
``[oslo_policy] policy_file`` (YAML, looked up in the config directories).
``enforce_new_defaults = False`` makes oslo.policy OR each rule with its
deprecated predecessor (``role:admin``); ``enforce_scope = False`` ignores
the token scope.
"""

from oslo_policy import policy

from placement import conf as placement_conf
from placement import exception
from placement import policies

_SCOPE_CREDS = ("system_scope", "system", "domain_id")


class Enforcer(policy.Enforcer):
    """One app's enforcer: placement's rules under the ``[oslo_policy]``
    options of the ConfigOpts the app was built for, and the grants it has
    decided (``authorize``)."""

    def __init__(self, conf):
        super().__init__(conf)
        self.register_defaults(policies.list_rules())
        self.load_rules()
        self.new_defaults = conf.oslo_policy.enforce_new_defaults
        self.granted = {}
        self.granted_rules = None  # the rules' fingerprint they were decided under

    def follow_conf(self):
        """Load the rules again if the policy file or ``enforce_new_defaults``
        changed since they were loaded (as oslo.policy does for the file,
        on every call)."""
        new_defaults = self.conf.oslo_policy.enforce_new_defaults
        if new_defaults != self.new_defaults:
            # Every default is judged again: the legacy fallback is an OR
            # oslo.policy builds into a rule as it loads it.
            self.new_defaults = new_defaults
            self.set_rules({})
            self.load_rules(force_reload=True)
        else:
            self.load_rules()


def get_enforcer():
    """An enforcer for placement's configuration files: the
    ``oslo.policy.enforcer`` entry point (``oslopolicy-checker`` and the
    other oslo.policy commands call it without arguments)."""
    conf = placement_conf.command_conf()
    placement_conf.parse_args(conf, [])
    return Enforcer(conf)


# Grants already decided are kept by each enforcer, for the rules they
# were decided under: oslo.policy evaluates a rule anew on every call (a
# good part of a small request's CPU), and the same caller asking the same
# rule of the same target gets the same answer while the rules are the
# same. Denials are not kept: they go through oslo.policy (its scope checks
# and messages) every time.
_GRANTED_MAX = 10000  # forgotten all at once past that


def _frozen(values):
    """A hashable form of a creds or target mapping (lists as tuples)."""
    return tuple(
        sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in values.items())
    )


def authorize(context, rule, target=None):
    """Raise PolicyNotAuthorized (a 403, doc/api.md "Policy") unless
    ``context`` may perform ``rule``."""
    if target is None:
        target = {"project_id": context.project_id, "user_id": context.user_id}
    enforcer = context.enforcer
    creds = context.to_policy_values()
    if not enforcer.conf.oslo_policy.enforce_scope:
        # Judged as a project-scoped token: scope mismatches are ignored.
        # (A plain dict: oslo.context's values cannot drop keys.)
        creds = dict(creds)
        for key in _SCOPE_CREDS:
            creds.pop(key, None)
    # A changed policy file or option counts now.
    enforcer.follow_conf()
    # Reloaded rules are new check objects (in place or in a new mapping).
    rules = enforcer.rules
    fingerprint = (id(rules), tuple(map(id, rules.values())))
    granted = enforcer.granted
    if enforcer.granted_rules != fingerprint or len(granted) > _GRANTED_MAX:
        granted.clear()
        enforcer.granted_rules = fingerprint
    try:
        key = (rule, _frozen(target), _frozen(creds))
        hash(key)
    except TypeError:  # a value that cannot be a key: no memory
        key = None
    if key is not None and key in granted:
        return
    try:
        enforcer.authorize(rule, target, creds, do_raise=True)
    except policy.InvalidScope:
        raise exception.PolicyNotAuthorized(rule)
    except policy.PolicyNotAuthorized:
        raise exception.PolicyNotAuthorized(
            "Policy does not allow %s to be performed." % rule
        )
    if key is not None:
        granted[key] = True
