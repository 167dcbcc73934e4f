"""The reads of nova-compute's periodic task (its provider, the
provider's allocations, inventories, aggregates and traits, and the
sharing providers of its aggregates, which are none) are one statement
each on SQLite, MySQL and PostgreSQL: the provider and its rows
in one round trip (the provider and its allocations: the look at the
catalog's stamp, where the triggers are), for a provider with rows, one
without any, and none (404). Each runs in autocommit
(``Database.single_read``): on MySQL and PostgreSQL that statement is
the request's only round trip, no BEGIN, COMMIT or ROLLBACK around it."""

import uuid

import pytest

from tests import fixtures
from tests import helpers

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
AGGREGATES = sorted(str(uuid.uuid4()) for _ in range(2))


@pytest.fixture(params=fixtures.BACKENDS)
def served(request, monkeypatch):
    fixtures.require_backend(request.param)
    with fixtures.counted_client(request.param, HEADERS, monkeypatch) as served:
        client, read, _ = served

        def read_selects(path, headers=None):
            """(response, its SELECTs, its round trips or None on SQLite)."""
            resp, statements, trips = read(path, headers)
            selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
            return resp, selects, trips

        yield client, read_selects


def _provider(client, with_rows):
    rp = str(uuid.uuid4())
    assert client.post("/resource_providers", json={"uuid": rp, "name": rp})
    if not with_rows:
        return rp
    url = "/resource_providers/%s" % rp
    assert client.put("/traits/CUSTOM_A").is_success
    inventories = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}
    for path, body in (
        (
            "/inventories",
            {"resource_provider_generation": 0, "inventories": inventories},
        ),
        ("/aggregates", {"resource_provider_generation": 1, "aggregates": AGGREGATES}),
        ("/traits", {"resource_provider_generation": 2, "traits": ["CUSTOM_A"]}),
    ):
        resp = client.put(url + path, json=body)
        assert resp.is_success, resp.text
    consumer = str(uuid.uuid4())
    claim = helpers.claim(rp, {"VCPU": 2})
    assert client.put("/allocations/%s" % consumer, json=claim).status_code == 204
    return rp


def _one_statement(selects, trips):
    assert len(selects) == 1
    assert trips is None or len(trips) == 1, trips


@pytest.mark.parametrize("with_rows", (True, False))
def test_each_read_is_one_statement(served, with_rows):
    client, read = served
    rp = _provider(client, with_rows)
    url = "/resource_providers/%s" % rp
    generation = 4 if with_rows else 0

    # The provider and its allocations are answered from the catalog
    # where the triggers are (doc/architecture.md "Allocations in
    # memory"): its catching up with the writes above, and its first
    # comparison, come before, as at a server's start rather than in a
    # periodic read; then each read is the look at the stamp.
    client.get(url + "/allocations")
    client.get(url + "/allocations")
    resp, selects, trips = read(url)
    assert resp.json()["generation"] == generation
    _one_statement(selects, trips)

    resp, selects, trips = read(url + "/allocations")
    body = resp.json()
    assert body["resource_provider_generation"] == generation
    assert [a["resources"] for a in body["allocations"].values()] == (
        [{"VCPU": 2}] if with_rows else []
    )
    _one_statement(selects, trips)

    resp, selects, trips = read(url + "/inventories")
    body = resp.json()
    assert body["resource_provider_generation"] == generation
    assert sorted(body["inventories"]) == (["MEMORY_MB", "VCPU"] if with_rows else [])
    _one_statement(selects, trips)

    resp, selects, trips = read(url + "/aggregates")
    body = resp.json()
    assert body["resource_provider_generation"] == generation
    assert sorted(body["aggregates"]) == (AGGREGATES if with_rows else [])
    _one_statement(selects, trips)

    resp, selects, trips = read(url + "/traits")
    body = resp.json()
    assert body["resource_provider_generation"] == generation
    assert body["traits"] == (["CUSTOM_A"] if with_rows else [])
    _one_statement(selects, trips)


@pytest.mark.parametrize(
    "kind", ("", "/allocations", "/inventories", "/aggregates", "/traits")
)
def test_an_unknown_provider_is_a_404(served, kind):
    _, read = served
    resp, selects, trips = read("/resource_providers/%s%s" % (uuid.uuid4(), kind))
    assert resp.status_code == 404
    assert resp.json()["errors"][0]["status"] == 404
    _one_statement(selects, trips)


# The microversions nova's report client reads them at, and the one
# tools/bench/heartbeat.py reads them at (times shown from 1.15).
VERSIONS = {
    "/inventories": ("1.0", "1.39"),
    "/traits": ("1.6", "1.39"),
    "/aggregates": ("1.19", "1.39"),
}


@pytest.mark.parametrize("with_rows", (True, False))
def test_novas_refresh_is_the_look(served, with_rows):
    """At nova's microversions and at 1.39 (the times shown) each read is
    the look at the catalog's stamp alone: the provider's rows and their
    times come from memory, as SQL has them, headers included."""
    client, read = served
    rp = _provider(client, with_rows)
    url = "/resource_providers/%s" % rp
    client.get(url + "/allocations")
    client.get(url + "/allocations")
    for path, versions in VERSIONS.items():
        for version in versions:
            headers = {"openstack-api-version": "placement " + version}
            resp, selects, trips = read(url + path, headers)
            assert resp.status_code == 200
            _one_statement(selects, trips)
            assert "catalog_changes" in selects[0], selects
            with fixtures.overrides(**{"placement.provider_catalog": False}):
                sql, selects, _ = read(url + path, headers)
            assert "catalog_changes" not in selects[0], selects
            assert resp.content == sql.content
            # The rows' latest time (inventories without rows: none), or
            # "now" (the aggregates, no traits), which a second may pass.
            if path == "/inventories" or (path == "/traits" and with_rows):
                names = ("last-modified", "cache-control")
            else:
                names = ("cache-control",)
            assert ("last-modified" in resp.headers) == ("last-modified" in sql.headers)
            for name in (*names, "openstack-api-version", "vary"):
                assert resp.headers.get(name) == sql.headers.get(name)
            assert resp.json()["resource_provider_generation"] == (
                4 if with_rows else 0
            )
            unknown, selects, trips = read(
                "/resource_providers/%s%s" % (uuid.uuid4(), path), headers
            )
            assert unknown.status_code == 404
            _one_statement(selects, trips)


def test_no_sharing_providers_is_the_look(served):
    """nova's look for the sharing providers of a host's aggregates finds
    none: the catalog answers after the look alone, in autocommit (its one
    round trip), the body and headers as the query's; one sharing provider
    in the aggregate and the query answers, listing it."""
    client, read = served
    rp = _provider(client, True)
    client.get("/resource_providers/%s/allocations" % rp)
    client.get("/resource_providers/%s/allocations" % rp)
    path = "/resource_providers?member_of=in:%s&required=MISC_SHARES_VIA_AGGREGATE"
    path %= ",".join(AGGREGATES)
    # Once the standard trait's id is remembered (a server's first ask).
    client.get(path)
    resp, selects, trips = read(path)
    assert resp.json() == {"resource_providers": []}
    _one_statement(selects, trips)
    assert "catalog_changes" in selects[0], selects
    with fixtures.overrides(**{"placement.provider_catalog": False}):
        sql, selects, _ = read(path)
    assert "catalog_changes" not in " ".join(selects), selects
    assert resp.content == sql.content
    for name in ("cache-control", "openstack-api-version", "vary"):
        assert resp.headers.get(name) == sql.headers.get(name)

    shared = str(uuid.uuid4())
    assert client.post("/resource_providers", json={"uuid": shared, "name": shared})
    url = "/resource_providers/%s" % shared
    for suffix, body in (
        (
            "/aggregates",
            {"resource_provider_generation": 0, "aggregates": AGGREGATES[1:]},
        ),
        (
            "/traits",
            {
                "resource_provider_generation": 1,
                "traits": ["MISC_SHARES_VIA_AGGREGATE"],
            },
        ),
    ):
        assert client.put(url + suffix, json=body).is_success
    resp, selects, _ = read(path)
    assert [p["uuid"] for p in resp.json()["resource_providers"]] == [shared]
    assert len(selects) > 1, selects
