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
    try:
        enforcer.authorize(rule, target, creds, do_raise=True)
    except policy.InvalidScope:
        raise exception.PolicyNotAuthorized(rule)
    except policy.PolicyNotAuthorized:
        raise exception.PolicyNotAuthorized(
            "Policy does not allow %s to be performed." % rule
        )
