"""The policy engine (oslo.policy) and the authorise call handlers make.

Rules are the defaults of ``placement.policies`` plus overrides from
``[oslo_policy] policy_file`` (YAML, looked up in the config directories).
``enforce_new_defaults = False`` makes oslo.policy OR each rule with its
deprecated predecessor (``role:admin``); ``enforce_scope = False`` ignores
the token scope.
"""

import operator
import time

from oslo_policy import policy

from placement import conf as placement_conf
from placement import exception
from placement import policies

_SCOPE_CREDS = ("system_scope", "system", "domain_id")


class Enforcer(policy.Enforcer):
    """One app's enforcer: placement's rules under the ``[oslo_policy]``
    options of the ConfigOpts the app was built for, and the grants it has
    decided (``authorize``).

    oslo.policy looks the policy files up in the configuration directories
    and stats them on every check (a tenth of a small request's CPU): here
    that look at the files is made at most once every ``RECHECK_EVERY``
    seconds of ``clock``, so an edited policy file counts from the first
    request a second or less after the edit.
    """

    RECHECK_EVERY = 1.0
    clock = staticmethod(time.monotonic)

    def __init__(self, conf):
        super().__init__(conf)
        self.register_defaults(policies.list_rules())
        self.looking = True
        self.load_rules()
        self.looking = False
        self.new_defaults = conf.oslo_policy.enforce_new_defaults
        self.checked_at = self.clock()
        self.granted = {}
        self.granted_rules = self._fingerprint()

    def load_rules(self, force_reload=False):
        """oslo.policy calls this on every check: the files are looked at
        only when ``follow_conf`` says it is time (or forced)."""
        if force_reload or self.looking:
            super().load_rules(force_reload)

    def _fingerprint(self):
        """Reloaded rules are new check objects (in place or in a new
        mapping)."""
        return (id(self.rules), tuple(map(id, self.rules.values())))

    def follow_conf(self):
        """Load the rules again if ``enforce_new_defaults`` changed since
        they were loaded, or, at most once every RECHECK_EVERY seconds, if
        the policy file did (as oslo.policy does for the file on every
        call); the grants decided under older rules are forgotten."""
        new_defaults = self.conf.oslo_policy.enforce_new_defaults
        if new_defaults != self.new_defaults:
            # Every default is judged again: the legacy fallback is an OR
            # oslo.policy builds into a rule as it loads it.
            self.new_defaults = new_defaults
            self.set_rules({})
            self.load_rules(force_reload=True)
        else:
            now = self.clock()
            if now - self.checked_at < self.RECHECK_EVERY:
                return
            self.checked_at = now
            self.looking = True
            try:
                self.load_rules()
            finally:
                self.looking = False
        fingerprint = self._fingerprint()
        if fingerprint != self.granted_rules:
            self.granted = {}
            self.granted_rules = fingerprint


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
    """A hashable form of a target mapping (lists as tuples)."""
    return tuple(
        sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in values.items())
    )


# The context's attributes its policy values (``to_policy_values``) are
# made of, besides its two lists of roles: with those, and whether scope
# counts, they are the caller in a grant's key, read without building the
# values (a test holds this list to oslo.context's).
CALLER_VALUES = (
    "user_id",
    "user_domain_id",
    "system_scope",
    "domain_id",
    "project_id",
    "project_domain_id",
    "is_admin_project",
    "service_user_id",
    "service_user_domain_id",
    "service_project_id",
    "service_project_domain_id",
)
_CALLER = operator.attrgetter(*CALLER_VALUES)


def authorize(context, rule, target=None):
    """Raise PolicyNotAuthorized (a 403, doc/api.md "Policy") unless
    ``context`` may perform ``rule``."""
    if target is None:
        target = {"project_id": context.project_id, "user_id": context.user_id}
        frozen_target = (
            ("project_id", context.project_id),
            ("user_id", context.user_id),
        )
    else:
        frozen_target = None
    enforcer = context.enforcer
    enforce_scope = enforcer.conf.oslo_policy.enforce_scope
    # A changed option counts now, a changed policy file within a second.
    enforcer.follow_conf()
    granted = enforcer.granted
    if len(granted) > _GRANTED_MAX:
        granted.clear()
    try:
        key = (
            rule,
            frozen_target or _frozen(target),
            enforce_scope,
            _CALLER(context),
            tuple(context.roles),
            tuple(context.service_roles),
        )
        hash(key)
    except TypeError:  # a value that cannot be a key: no memory
        key = None
    if key is not None and key in granted:
        return
    creds = context.to_policy_values()
    if not enforce_scope:
        # Judged as a project-scoped token: scope mismatches are ignored.
        # (A plain dict: oslo.context's values cannot drop keys.)
        creds = dict(creds)
        for key_name in _SCOPE_CREDS:
            creds.pop(key_name, None)
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
