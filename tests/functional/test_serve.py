"""placement-api serving for real (gunicorn in a subprocess on a free port),
and the configuration rules of the WSGI entry point."""
import contextlib
import json
import sys
import urllib.error
import urllib.request

import pytest

from tests import helpers
from tests.functional import live_server

pytestmark = pytest.mark.slow


def get(url, **headers):
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.load(e)


@pytest.fixture
def server(tmp_path):
    """Starts placement-api; yields a function returning its base URL."""
    with contextlib.ExitStack() as running:
        yield lambda *args, **env: running.enter_context(
            live_server.placement_api(tmp_path, *args, **env))


def test_serves_the_api(server):
    base = server("--workers", "2", "--threads", "2")
    status, headers, body = get(base + "/resource_providers",
                                **{"x-auth-token": "admin"})
    assert status == 200
    assert body == {"resource_providers": []}
    assert headers["x-openstack-request-id"].startswith("req-")
    status, _, body = get(base + "/resource_classes",
                          **{"x-auth-token": "admin",
                             "openstack-api-version": "placement 1.2"})
    assert "VCPU" in [c["name"] for c in body["resource_classes"]]
    status, _, body = get(base + "/resource_providers")
    assert status == 401


def test_serves_under_a_prefix(server):
    base = server(SCRIPT_NAME="/placement")
    status, _, body = get(base + "/placement/")
    assert status == 200
    assert body["versions"][0]["max_version"] == "1.39"
    status, _, body = get(base + "/placement",
                          **{"x-auth-token": "admin"})
    assert body["versions"][0]["id"] == "v1.0"
    status, _, body = get(base + "/placement/resource_classes/VCPU",
                          **{"x-auth-token": "admin",
                             "openstack-api-version": "placement 1.2"})
    assert body["links"][0]["href"] == "/placement/resource_classes/VCPU"


def test_refuses_to_start_without_connection():
    result = helpers.run([helpers.script("placement-api")], timeout=60)
    assert result.returncode == 1
    assert "[placement_database] connection is not set" in result.stderr


# -- placement.wsgi.api: configuration ---------------------------------------

PROBE = """
from placement.conf import CONF
from placement.wsgi import api
print(CONF.api.auth_strategy, CONF.placement.max_allocation_candidates)
"""


def _probe(**env):
    return helpers.run([sys.executable, "-c", PROBE], env, timeout=60)


def _write_conf(directory, connection):
    directory.mkdir(exist_ok=True)
    (directory / "placement.conf").write_text(
        "[api]\nauth_strategy = noauth2\n"
        "[placement]\nmax_allocation_candidates = 7\n"
        "[placement_database]\nconnection = %s\n"
        "sync_on_startup = True\n" % connection)


def test_wsgi_reads_os_placement_config_dir(tmp_path):
    _write_conf(tmp_path / "etc", "sqlite:///%s/p.sqlite" % tmp_path)
    result = _probe(OS_PLACEMENT_CONFIG_DIR=str(tmp_path / "etc"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].split() == ["noauth2", "7"]
    # sync_on_startup built the schema.
    assert (tmp_path / "p.sqlite").exists()


def test_environment_overrides_the_file(tmp_path):
    _write_conf(tmp_path / "etc", "sqlite:///%s/p.sqlite" % tmp_path)
    result = _probe(OS_PLACEMENT_CONFIG_DIR=str(tmp_path / "etc"),
                    OS_PLACEMENT__MAX_ALLOCATION_CANDIDATES="9")
    assert result.stdout.splitlines()[-1].split() == ["noauth2", "9"], result.stderr


def test_wsgi_without_connection_fails_hard(tmp_path):
    (tmp_path / "placement.conf").write_text("[api]\n")
    result = _probe(OS_PLACEMENT_CONFIG_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "connection is not set" in result.stdout + result.stderr
