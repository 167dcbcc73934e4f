"""The policy engine (oslo.policy) and the authorise call handlers make.

Rules are the defaults of ``placement.policies`` plus overrides from
``[oslo_policy] policy_file`` (YAML, looked up in the config directories).
``enforce_new_defaults = False`` makes oslo.policy OR each rule with its
deprecated predecessor (``role:admin``); ``enforce_scope = False`` ignores
the token scope.
"""

from oslo_config import cfg
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from placement import exception
from placement import policies

_ENFORCER = None
_SCOPE_CREDS = ("system_scope", "system", "domain_id")


def get_enforcer(conf=None):
    """The process-wide enforcer (also the oslo.policy.enforcer entry point)."""
    global _ENFORCER
    if _ENFORCER is None:
        conf = conf or cfg.CONF
        policy_opts.set_defaults(conf)
        _ENFORCER = policy.Enforcer(conf)
        _ENFORCER.register_defaults(policies.list_rules())
        _ENFORCER.load_rules()
    return _ENFORCER


def reset():
    global _ENFORCER
    if _ENFORCER is not None:
        _ENFORCER.clear()
    _ENFORCER = None
    _GRANTED.clear()


# Grants already decided, for the rules they were decided under: oslo.policy
# evaluates a rule anew on every call (a good part of a small request's
# CPU), and the same caller asking the same rule of the same target gets
# the same answer while the rules are the same. Denials are not kept: they
# go through oslo.policy (its scope checks and messages) every time.
_GRANTED: dict = {}
_GRANTED_MAX = 10000  # forgotten all at once past that
_GRANTED_RULES: list = [None]  # the rules' fingerprint they were decided under


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
    enforcer = get_enforcer()
    creds = context.to_policy_values()
    if not enforcer.conf.oslo_policy.enforce_scope:
        # Judged as a project-scoped token: scope mismatches are ignored.
        # (A plain dict: oslo.context's values cannot drop keys.)
        creds = dict(creds)
        for key in _SCOPE_CREDS:
            creds.pop(key, None)
    # As oslo.policy does on every call: a changed policy file counts now.
    enforcer.load_rules()
    # Reloaded rules are new check objects (in place or in a new mapping).
    rules = enforcer.rules
    fingerprint = (id(rules), tuple(map(id, rules.values())))
    if _GRANTED_RULES[0] != fingerprint or len(_GRANTED) > _GRANTED_MAX:
        _GRANTED.clear()
        _GRANTED_RULES[0] = fingerprint
    try:
        key = (rule, _frozen(target), _frozen(creds))
        hash(key)
    except TypeError:  # a value that cannot be a key: no memory
        key = None
    if key is not None and key in _GRANTED:
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
        _GRANTED[key] = True
