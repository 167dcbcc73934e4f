"""No options on a global: placement registers nothing on oslo.config's
``cfg.CONF`` (another project's tests import both), and an app built for a
ConfigOpts reads only that object, so that two apps in one process with
different options answer differently at the same time."""

import subprocess
import sys
import uuid

from oslo_config import cfg

from placement import conf as placement_conf
from placement import deploy
from tests.wsgi_client import call

LATEST = "placement latest"

# Notes what the libraries placement uses register on the global ConfigOpts
# as they are imported (oslo.middleware and osprofiler do), then imports placement's
# modules, builds an app on its own ConfigOpts and serves paths that reach
# every layer, and prints the groups and options the global gained.
GLOBAL_PROBE = """
import sys
from oslo_config import cfg
import oslo_log.log, oslo_middleware.healthcheck, oslo_policy.policy, osprofiler.opts
libraries = set(cfg.CONF)
from placement import conf, deploy
from placement.cmd import api, manage, status
from tests.wsgi_client import call

own = cfg.ConfigOpts()
conf.register_opts(own)
own([], default_config_files=[])
own.set_override("auth_strategy", "noauth2", group="api")
own.set_override("connection", "sqlite:///" + sys.argv[1], group="placement_database")
app = deploy.build_app(own, sync_schema=True)
for path in ("/", "/healthcheck", "/resource_providers", "/traits", "/metrics",
             "/allocation_candidates?resources=VCPU:1"):
    response = call(app, path, x_auth_token="admin",
                    openstack_api_version="placement latest")
    assert response.status == 200, path
print(sorted(set(cfg.CONF) - libraries))
"""


def test_nothing_is_registered_on_the_global_conf(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROBE, str(tmp_path / "p.sqlite")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_register_opts_gives_every_group_the_app_reads():
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    placement_conf.register_opts(conf)  # again: a no-op
    conf([], default_config_files=[])
    assert conf.cors.allow_methods == placement_conf.CORS_ALLOW_METHODS
    assert conf.oslo_middleware.max_request_body_size == (
        placement_conf.MAX_REQUEST_BODY_SIZE
    )
    assert conf.oslo_middleware.enable_proxy_headers_parsing is False
    assert conf.oslo_policy.enforce_new_defaults is True
    assert conf.placement.allocation_candidates_generation_strategy
    assert conf.workarounds.optimize_for_wide_provider_trees is False
    # osprofiler's own options, as the reference reads them.
    assert conf.profiler.enabled is False
    assert conf.profiler.trace_sqlalchemy is False
    assert conf.profiler_otlp.service_name_prefix is None
    # Placement's defaults went on this ConfigOpts, not on the libraries'
    # option objects every other ConfigOpts shares.
    other = cfg.ConfigOpts()
    other.register_opts(placement_conf.LIB_GROUPS["cors"], group="cors")
    other([], default_config_files=[])
    assert other.cors.allow_methods != placement_conf.CORS_ALLOW_METHODS


def _app(tmp_path, **options):
    return deploy.build_app(_conf(tmp_path, **options), sync_schema=True)


def _conf(tmp_path, **options):
    """A ConfigOpts of its own, on a new SQLite file, with ``options``
    ("group.name": value)."""
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override("auth_strategy", "noauth2", group="api")
    conf.set_override(
        "connection",
        "sqlite:///%s/%s.sqlite" % (tmp_path, uuid.uuid4().hex),
        group="placement_database",
    )
    for key, value in options.items():
        group, name = key.split(".")
        conf.set_override(name, value, group=group)
    return conf


def _put(app, path, body):
    response = call(
        app, path, "PUT", body=body, x_auth_token="admin", openstack_api_version=LATEST
    )
    assert response.status in (200, 201, 204), response.body
    return response


def _provider(app, name):
    rp = str(uuid.uuid4())
    response = call(
        app,
        "/resource_providers",
        "POST",
        body={"name": name, "uuid": rp},
        x_auth_token="admin",
        openstack_api_version=LATEST,
    )
    assert response.status in (200, 201), response.body
    _put(
        app,
        "/resource_providers/%s/inventories" % rp,
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
    )
    return rp


def _candidates(app):
    response = call(
        app,
        "/allocation_candidates?resources=VCPU:1",
        x_auth_token="admin",
        openstack_api_version=LATEST,
    )
    assert response.status == 200
    return len(response.json()["allocation_requests"])


def test_two_apps_read_their_own_candidate_options(tmp_path):
    capped = _app(tmp_path, **{"placement.max_allocation_candidates": 1})
    free = _app(tmp_path)
    for app in (capped, free):
        _provider(app, "a")
        _provider(app, "b")
    assert (_candidates(capped), _candidates(free)) == (1, 2)


def _incomplete_consumer_usages(app, project):
    """Allocate without an owner (before 1.8): the usages of ``project``."""
    rp = _provider(app, "cn")
    consumer = str(uuid.uuid4())
    body = {
        "allocations": [{"resource_provider": {"uuid": rp}, "resources": {"VCPU": 2}}]
    }
    response = call(
        app, "/allocations/%s" % consumer, "PUT", body=body, x_auth_token="admin"
    )
    assert response.status == 204, response.body
    response = call(
        app,
        "/usages?project_id=%s" % project,
        x_auth_token="admin",
        openstack_api_version="placement 1.9",
    )
    assert response.status == 200
    return response.json()["usages"]


def test_two_apps_record_their_own_incomplete_consumer_project(tmp_path):
    first = _app(tmp_path, **{"placement.incomplete_consumer_project_id": "p-one"})
    second = _app(tmp_path, **{"placement.incomplete_consumer_project_id": "p-two"})
    assert _incomplete_consumer_usages(first, "p-one") == {"VCPU": 2}
    assert _incomplete_consumer_usages(second, "p-one") == {}


def test_two_apps_enforce_their_own_policy_options(tmp_path):
    scoped = _app(tmp_path)
    unscoped = _app(tmp_path, **{"oslo_policy.enforce_scope": False})
    system_admin = {"x_auth_token": "admin", "openstack_system_scope": "all"}
    for app, status in ((scoped, 403), (unscoped, 200)):
        response = call(app, "/resource_providers", **system_admin)
        assert response.status == status


def test_legacy_policy_defaults_follow_the_apps_conf(tmp_path):
    """``enforce_new_defaults`` changed on the app's ConfigOpts after the
    app is built (as a test's config fixture does) counts from the next
    request: the legacy fallback lets any admin reshape."""
    conf = _conf(tmp_path)
    app = deploy.build_app(conf, sync_schema=True)
    assert _reshape_as_admin(app) == 403
    conf.set_override("enforce_new_defaults", False, group="oslo_policy")
    assert _reshape_as_admin(app) == 400  # allowed: the empty body is bad
    conf.clear_override("enforce_new_defaults", group="oslo_policy")
    assert _reshape_as_admin(app) == 403


def _reshape_as_admin(app):
    return call(
        app,
        "/reshaper",
        "POST",
        body={},
        x_auth_token="admin",
        openstack_api_version=LATEST,
    ).status
