"""The fixtures other projects import to test against placement in-process
(placement.tests; nova's functional tests subclass PlacementFixture), used
as those projects use them: through ``requests`` at the fixture's endpoint
(doc/testing-with-placement.md)."""

import os
import re
import threading

import fixtures
import pytest
import requests
from oslo_config import cfg
from oslo_config import fixture as config_fixture

from placement import conf as placement_conf
from placement.tests import fixtures as placement_fixtures
from placement.tests.functional.fixtures import placement

NESTED = "placement 1.29"


class Client:
    def __init__(self, fixture):
        self.fixture = fixture

    def __call__(self, method, path, version="placement latest", **kwargs):
        return requests.request(
            method,
            self.fixture.endpoint + path,
            headers={
                "x-auth-token": self.fixture.token,
                "openstack-api-version": version,
            },
            **kwargs,
        )


@pytest.fixture
def served():
    fixture = placement.PlacementFixture()
    fixture.setUp()
    try:
        yield fixture, Client(fixture)
    finally:
        fixture.cleanUp()


def test_the_fixture_serves_placement_at_its_endpoint(served):
    fixture, client = served
    assert re.match(r"^http://[0-9a-f-]{36}/placement$", fixture.endpoint)
    assert (fixture.token, fixture.db) == ("admin", True)
    assert fixture.conf_fixture.conf.api.auth_strategy == "noauth2"
    root = client("GET", "", version=None)
    assert root.status_code == 200
    assert root.json()["versions"][0]["max_version"] == "1.39"
    created = client("POST", "/resource_providers", json={"name": "cn1"})
    assert created.status_code == 200
    listed = client("GET", "/resource_providers").json()["resource_providers"]
    assert [rp["name"] for rp in listed] == ["cn1"]
    # A fresh database holds the standard names.
    assert client("GET", "/traits/HW_CPU_X86_AVX2").status_code == 204


def test_the_legacy_policy_defaults_apply(served):
    """As clients' tests expect of an admin token: admin may reshape
    (under the new defaults only a service may)."""
    _, client = served
    assert client("POST", "/reshaper", json={}).status_code == 400


def _nested_cloud(client, roots=2, children=2):
    """``roots`` trees, each with ``children`` children holding VCPU."""
    for r in range(roots):
        root = client("POST", "/resource_providers", json={"name": "r%d" % r}).json()
        for c in range(children):
            child = client(
                "POST",
                "/resource_providers",
                json={
                    "name": "r%d-c%d" % (r, c),
                    "parent_provider_uuid": root["uuid"],
                },
            ).json()
            response = client(
                "PUT",
                "/resource_providers/%s/inventories" % child["uuid"],
                json={
                    "resource_provider_generation": child["generation"],
                    "inventories": {"VCPU": {"total": 4}},
                },
            )
            assert response.status_code == 200


def _roots_of_first_two(client):
    """How many trees the first two candidates come from."""
    answer = client(
        "GET", "/allocation_candidates?resources=VCPU:1&limit=2", version=NESTED
    ).json()
    summaries = answer["provider_summaries"]
    return len(
        {
            summaries[rp]["root_provider_uuid"]
            for request in answer["allocation_requests"]
            for rp in request["allocations"]
        }
    )


def test_the_generation_strategy_set_on_the_conf_fixture_takes_effect(served):
    fixture, client = served
    _nested_cloud(client)
    fixture.conf_fixture.config(
        group="placement", allocation_candidates_generation_strategy="depth-first"
    )
    assert _roots_of_first_two(client) == 1
    fixture.conf_fixture.config(
        group="placement", allocation_candidates_generation_strategy="breadth-first"
    )
    assert _roots_of_first_two(client) == 2


def test_optimize_for_wide_provider_trees_is_accepted(served):
    """Candidate generation always prunes what cannot fit: the workaround
    option exists for clients that set it, and changes no answer."""
    fixture, client = served
    _nested_cloud(client, roots=3)
    path = "/allocation_candidates?resources=VCPU:2"
    before = client("GET", path, version=NESTED).json()
    fixture.conf_fixture.config(
        group="workarounds", optimize_for_wide_provider_trees=True
    )
    assert client("GET", path, version=NESTED).json() == before


def test_cleanup_leaves_nothing_behind():
    threads = threading.active_count()
    fixture = placement.PlacementFixture()
    fixture.setUp()
    client = Client(fixture)
    assert client("GET", "/resource_providers").status_code == 200
    path = fixture.conf_fixture.conf.placement_database.connection
    database = path[len("sqlite:///") :]
    assert os.path.exists(database)
    fixture.cleanUp()
    assert not os.path.exists(database)
    with pytest.raises(requests.ConnectionError):
        client("GET", "/resource_providers")
    assert threading.active_count() == threads


def test_a_database_of_the_callers_own(tmp_path):
    """Another project's configuration and database fixture, then the app
    on them (db=False, register_opts=False), as nova's tests do."""
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    with fixtures.Fixture() as scope:
        conf_fixture = scope.useFixture(config_fixture.Config(conf))
        database = scope.useFixture(
            placement_fixtures.Database(conf_fixture, set_config=True)
        )
        assert conf.placement_database.connection.startswith("sqlite:///")
        fixture = scope.useFixture(
            placement.PlacementFixture(
                conf_fixture=conf_fixture, db=False, register_opts=False
            )
        )
        client = Client(fixture)
        created = client("POST", "/resource_providers", json={"name": "cn1"})
        assert created.status_code == 200
        with database.db.reader() as conn:
            names = conn.exec_driver_sql("SELECT name FROM resource_providers")
            assert [n for (n,) in names] == ["cn1"]


def test_without_intercept_the_app_is_built_but_not_routed():
    fixture = placement.PlacementFixture(use_intercept=False)
    with fixture:
        assert fixture.app is not None
        with pytest.raises(requests.ConnectionError):
            Client(fixture)("GET", "/resource_providers", timeout=5)
