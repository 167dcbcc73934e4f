"""Every policy rule's default for each kind of caller (doc/api.md
"Policy"), the
legacy fallback (enforce_new_defaults=False), enforce_scope=False and
overrides from a policy file.

Each rule is exercised through one cheap request on an empty database: the
policy check runs before any lookup or validation, so an allowed caller gets
some non-403 answer (200, 400, 404...) and a denied one the 403 naming the
rule.
"""

import os

import pytest
from oslo_policy import policy as oslo_policy

from placement import context
from placement import policies
from placement import policy
from tests.wsgi_client import call
from tests.wsgi_client import pipeline

RP = "/resource_providers/7e9ac3d0-1b42-4e0e-8a4c-3f0f6a3b9b11"
CONSUMER = "/allocations/0c3e2a4e-9f4b-4d47-a3a5-63e2f6d0f1a2"

# rule (without "placement:") -> (method, path, body)
REQUESTS = {
    "resource_providers:list": ("GET", "/resource_providers", None),
    "resource_providers:create": ("POST", "/resource_providers", {}),
    "resource_providers:show": ("GET", RP, None),
    "resource_providers:update": ("PUT", RP, {}),
    "resource_providers:delete": ("DELETE", RP, None),
    "resource_classes:list": ("GET", "/resource_classes", None),
    "resource_classes:create": ("POST", "/resource_classes", {}),
    "resource_classes:show": ("GET", "/resource_classes/VCPU", None),
    "resource_classes:update": ("PUT", "/resource_classes/CUSTOM_P", None),
    "resource_classes:delete": ("DELETE", "/resource_classes/CUSTOM_N", None),
    "resource_providers:inventories:list": ("GET", RP + "/inventories", None),
    "resource_providers:inventories:create": ("POST", RP + "/inventories", {}),
    "resource_providers:inventories:show": ("GET", RP + "/inventories/VCPU", None),
    "resource_providers:inventories:update": ("PUT", RP + "/inventories", {}),
    "resource_providers:inventories:delete": ("DELETE", RP + "/inventories", None),
    "resource_providers:aggregates:list": ("GET", RP + "/aggregates", None),
    "resource_providers:aggregates:update": ("PUT", RP + "/aggregates", {}),
    "resource_providers:usages": ("GET", RP + "/usages", None),
    "usages": ("GET", "/usages?project_id=proj", None),
    "traits:list": ("GET", "/traits", None),
    "traits:show": ("GET", "/traits/HW_CPU_X86_AVX", None),
    "traits:update": ("PUT", "/traits/CUSTOM_P", None),
    "traits:delete": ("DELETE", "/traits/CUSTOM_N", None),
    "resource_providers:traits:list": ("GET", RP + "/traits", None),
    "resource_providers:traits:update": ("PUT", RP + "/traits", {}),
    "resource_providers:traits:delete": ("DELETE", RP + "/traits", None),
    "allocations:manage": ("POST", "/allocations", {}),
    "allocations:list": ("GET", CONSUMER, None),
    "allocations:update": ("PUT", CONSUMER, {}),
    "allocations:delete": ("DELETE", CONSUMER, None),
    "resource_providers:allocations:list": ("GET", RP + "/allocations", None),
    "allocation_candidates:list": (
        "GET",
        "/allocation_candidates?resources=VCPU:1",
        None,
    ),
    "reshaper:reshape": ("POST", "/reshaper", {}),
    "maintenance:audit": ("GET", "/maintenance/audit", None),
    "maintenance:drain": (
        "GET",
        "/maintenance/drain?in_tree=" + RP.rsplit("/", 1)[1],
        None,
    ),
}
ALL = sorted(REQUESTS)
SERVICE_ONLY = {"reshaper:reshape"}
# Operator tools: rule admin_api (role:admin), which a service is not.
ADMIN_ONLY = {"maintenance:audit", "maintenance:drain"}

# Callers under noauth2: token "user:project", X-Roles, system scope.
CALLERS = {
    "admin": {"x_auth_token": "admin"},
    "service": {"x_auth_token": "nova:proj", "x_roles": "service"},
    "admin+service": {"x_auth_token": "admin", "x_roles": "admin,service"},
    "reader": {"x_auth_token": "alice:proj", "x_roles": "reader"},
    "other-reader": {"x_auth_token": "bob:other", "x_roles": "reader"},
    "no-role": {"x_auth_token": "alice:proj"},
    "member": {"x_auth_token": "alice:proj", "x_roles": "member"},
    "system-admin": {"x_auth_token": "admin", "openstack_system_scope": "all"},
}


def request(app, rule, caller):
    method, path, body = REQUESTS[rule]
    return call(
        app,
        path,
        method,
        body=body,
        openstack_api_version="placement latest",
        **CALLERS[caller],
    )


def allowed(app, rule, caller):
    response = request(app, rule, caller)
    if response.status != 403:
        return True
    error = response.json()["errors"][0]
    assert ("placement:%s" % rule) in error["detail"]
    assert "vary" not in response.headers
    assert response.headers["openstack-api-version"] == "placement 1.39"
    return False


def test_every_rule_has_a_request():
    assert {r.name for r in policies.API_RULES} == {
        "placement:" + rule for rule in REQUESTS
    }


def matrix(app, callers):
    """{(rule, caller): allowed?} for every rule."""
    return {
        (rule, caller): allowed(app, rule, caller) for rule in ALL for caller in callers
    }


def expect(callers, rule_allows):
    return {
        (rule, caller): rule_allows(rule, caller) for rule in ALL for caller in callers
    }


@pytest.fixture
def default_app():
    with pipeline() as app:
        yield app


def test_defaults(default_app):
    callers = list(CALLERS)
    expected = {
        "service": lambda rule: rule not in ADMIN_ONLY,
        "admin+service": lambda rule: True,
        "admin": lambda rule: rule not in SERVICE_ONLY,
        "reader": lambda rule: rule == "usages",
    }
    assert matrix(default_app, callers) == expect(
        callers, lambda rule, caller: expected.get(caller, lambda rule: False)(rule)
    )


def test_denial_messages(default_app):
    response = request(default_app, "traits:list", "no-role")
    assert (
        "Policy does not allow placement:traits:list to be performed."
        in response.json()["errors"][0]["detail"]
    )
    # A scope mismatch names just the rule.
    response = request(default_app, "traits:list", "system-admin")
    detail = response.json()["errors"][0]["detail"]
    assert "placement:traits:list" in detail
    assert "Policy does not allow" not in detail


def test_reader_usages_only_for_own_project(default_app):
    ok = call(
        default_app,
        "/usages?project_id=proj",
        openstack_api_version="placement 1.9",
        **CALLERS["reader"],
    )
    other = call(
        default_app,
        "/usages?project_id=someone-else",
        openstack_api_version="placement 1.9",
        **CALLERS["reader"],
    )
    assert ok.status == 200
    assert other.status == 403


def test_legacy_defaults_add_admin():
    # Every deprecated fallback is role:admin: admin may even reshape.
    callers = ["admin", "service", "reader", "no-role", "system-admin"]
    with pipeline(**{"oslo_policy.enforce_new_defaults": False}) as app:
        found = matrix(app, callers)
    assert found == expect(
        callers,
        lambda rule, caller: (
            caller == "admin"
            or (caller == "service" and rule not in ADMIN_ONLY)
            or (caller == "reader" and rule == "usages")
        ),
    )


def test_without_scope_enforcement_system_tokens_are_judged_by_roles():
    callers = ["system-admin", "no-role", "admin"]
    with pipeline(**{"oslo_policy.enforce_scope": False}) as app:
        found = matrix(app, callers)
    assert found == expect(
        callers, lambda rule, caller: caller != "no-role" and rule not in SERVICE_ONLY
    )


def test_policy_file_overrides(tmp_path):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        '"placement:traits:list": "role:reader"\n'
        '"placement:reshaper:reshape": "rule:admin_or_service_api"\n'
        '"admin_or_service_api": "role:admin or role:service or '
        'role:operator"\n'
    )
    with pipeline(**{"oslo_policy.policy_file": str(policy_file)}) as app:
        assert allowed(app, "traits:list", "reader")
        assert not allowed(app, "traits:list", "admin")
        assert allowed(app, "reshaper:reshape", "admin")
        operator = {"x_auth_token": "op:proj", "x_roles": "operator"}
        response = call(
            app, "/resource_classes", openstack_api_version="placement 1.2", **operator
        )
        assert response.status == 200
        # Untouched rules keep their defaults.
        assert not allowed(app, "traits:show", "reader")


def test_missing_policy_file_means_defaults(tmp_path):
    missing = str(tmp_path / "nowhere.yaml")
    with pipeline(**{"oslo_policy.policy_file": missing}) as app:
        assert allowed(app, "traits:list", "admin")
        assert not allowed(app, "traits:list", "reader")


class Clock:
    """The enforcer's clock, moved by the test."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_policy_file_changes_count_within_a_second(tmp_path, monkeypatch):
    """The policy file is looked at again at most once a second, and a
    change counts from then: grants given under the old rules are
    forgotten."""
    clock = Clock()
    monkeypatch.setattr(policy.Enforcer, "clock", staticmethod(clock))
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text('"placement:traits:list": "role:reader"\n')
    with pipeline(**{"oslo_policy.policy_file": str(policy_file)}) as app:
        assert allowed(app, "traits:list", "reader")
        assert allowed(app, "traits:list", "reader")
        policy_file.write_text('"placement:traits:list": "role:admin"\n')
        # oslo.policy notices a change by the file's modification time.
        stat = policy_file.stat()
        os.utime(policy_file, (stat.st_atime, stat.st_mtime + 10))
        clock.now += policy.Enforcer.RECHECK_EVERY / 2
        assert allowed(app, "traits:list", "reader")  # not looked at yet
        clock.now += policy.Enforcer.RECHECK_EVERY / 2
        assert not allowed(app, "traits:list", "reader")
        assert allowed(app, "traits:list", "admin")


def test_policy_files_are_not_looked_up_per_request(tmp_path, monkeypatch):
    """Between two looks at the files, requests find them in no
    configuration directory (oslo.policy's lookup, a tenth of a small
    request's CPU when made per check)."""
    clock = Clock()
    monkeypatch.setattr(policy.Enforcer, "clock", staticmethod(clock))
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text('"placement:traits:list": "role:reader"\n')
    looked_up = []
    real = oslo_policy.Enforcer._get_policy_path

    def counted(self, path):
        looked_up.append(path)
        return real(self, path)

    monkeypatch.setattr(oslo_policy.Enforcer, "_get_policy_path", counted)
    with pipeline(**{"oslo_policy.policy_file": str(policy_file)}) as app:
        looked_up.clear()
        for _ in range(5):
            assert allowed(app, "traits:list", "reader")
        assert looked_up == []
        clock.now += policy.Enforcer.RECHECK_EVERY
        assert allowed(app, "traits:list", "reader")
        assert looked_up


def test_a_grant_is_remembered_for_every_policy_value_of_the_caller():
    """A grant's key reads the caller from the context's attributes, not
    from ``to_policy_values`` (built only when a rule is judged): the
    attributes must be all the values oslo.context judges by."""
    values = context.RequestContext(roles=["admin"]).to_policy_values()
    assert set(values) == set(policy.CALLER_VALUES) | {"roles", "service_roles"}
