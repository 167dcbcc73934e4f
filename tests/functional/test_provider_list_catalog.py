"""The unfiltered provider list written ahead from the catalog: two
workers on one database, the reading one answering GET /resource_providers
with the bytes and headers the uncached SQL path gives, at every
microversion and mount prefix, after every kind of change made through the
other worker (generations, names, parents, providers coming and going),
and without reading every generation again while none moved."""

import uuid

import pytest

from tests import fixtures
from tests import wsgi_client
from tests.functional.test_candidate_catalog import two_workers
from tests.helpers import statements

VERSIONS = ["1.%d" % minor for minor in range(40)]


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.database_url(request.param) as url, two_workers(url, url) as cloud:
        yield cloud


def _get(cloud, catalog_on, version="1.39", script_name=""):
    with fixtures.overrides(**{"placement.provider_catalog": catalog_on}):
        resp = wsgi_client.call(
            cloud.reader,
            "/resource_providers",
            script_name=script_name,
            x_auth_token="admin",
            openstack_api_version="placement %s" % version,
        )
    assert resp.status == 200, resp.body
    return resp.body, resp.headers.get("last-modified")


def _same_as_sql(cloud, version="1.39", script_name=""):
    """The cached answer, twice (written, then kept), equals the SQL one."""
    uncached = _get(cloud, False, version, script_name)
    assert _get(cloud, True, version, script_name) == uncached
    assert _get(cloud, True, version, script_name) == uncached
    return uncached[0]


def _allocate(cloud, rp, vcpu):
    cloud.write(
        "/allocations/%s" % uuid.uuid4(),
        body={
            "allocations": {rp: {"resources": {"VCPU": vcpu}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )


def test_every_microversion_and_prefix_gives_the_sql_bytes(cloud):
    # No providers: last-modified is the time of the answer.
    assert _get(cloud, True)[0] == _get(cloud, False)[0]
    assert _get(cloud, True)[0] == b'{"resource_providers":[]}'
    root = cloud.provider('caf\u00e9 "1"\t</>\\ \U0001f600')
    child = cloud.provider("child", root)
    cloud.provider("grandchild", child)
    cloud.provider("other")
    for version in VERSIONS:
        for script_name in ("", "/placement"):
            _same_as_sql(cloud, version, script_name)


def test_changes_through_the_other_worker_show(cloud):
    root = cloud.provider("root")
    child = cloud.provider("child", root)
    cloud.inventories(child, VCPU=8)
    _same_as_sql(cloud)
    _allocate(cloud, child, 1)  # a generation, not a catalog change
    assert b'"generation":2' in _same_as_sql(cloud)
    cloud.write(
        "/resource_providers/%s" % child,
        body={"name": "renamed", "parent_provider_uuid": root},
    )
    assert b'"renamed"' in _same_as_sql(cloud)
    other = cloud.provider("other")
    cloud.write(
        "/resource_providers/%s" % child,
        body={"name": "moved", "parent_provider_uuid": other},
    )
    _same_as_sql(cloud)
    cloud.call(cloud.writer, "/resource_providers/%s" % root, "DELETE", status=204)
    assert root.encode() not in _same_as_sql(cloud)


def test_generations_are_read_again_only_when_they_moved(cloud):
    rp = cloud.provider("rp")
    cloud.inventories(rp, VCPU=8)
    _same_as_sql(cloud)

    def read_generations():
        with statements(cloud.reader_db) as seen:
            _get(cloud, True)
        return any(
            "resource_providers.generation" in s and "sum(" not in s.lower()
            for s in seen
        )

    assert not read_generations()
    _allocate(cloud, rp, 1)
    assert read_generations()
    assert not read_generations()
