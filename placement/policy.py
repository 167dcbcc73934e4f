"""The policy engine (oslo.policy) and the authorise call handlers make."""
from oslo_config import cfg
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from placement import policies
from placement.api import errors

_ENFORCER = None


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
    """Raise the contract's 403 unless ``context`` may perform ``rule``."""
    if target is None:
        target = {"project_id": context.project_id, "user_id": context.user_id}
    try:
        get_enforcer().authorize(rule, target, context.to_policy_values(),
                                 do_raise=True)
    except policy.InvalidScope:
        raise errors.Forbidden(rule, vary=False)
    except policy.PolicyNotAuthorized:
        raise errors.Forbidden(
            "Policy does not allow %s to be performed." % rule, vary=False)
