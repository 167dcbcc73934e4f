"""Concurrent writers of one provider's traits and aggregates.

Every writer sends the provider generation it read; exactly one may win, the
others must get a clean 409 placement.concurrent_update (never a 5xx), and
the generation must have moved exactly once.
"""

import uuid

import httpx
import pytest

from tests import fixtures
from tests import helpers

WRITERS = 6
HEADERS = {
    "x-auth-token": "admin",
    "accept": "application/json",
    "content-type": "application/json",
    "openstack-api-version": "placement latest",
}


@pytest.fixture(params=fixtures.BACKENDS)
def client_factory(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, _db):

        def make():
            return httpx.Client(
                transport=httpx.WSGITransport(app=app),
                base_url="http://localhost",
                headers=HEADERS,
            )

        yield make


def _provider(client):
    rp = str(uuid.uuid4())
    resp = client.post("/resource_providers", json={"name": rp, "uuid": rp})
    assert resp.status_code == 200, resp.text
    return rp


def _race(client_factory, path, bodies, **kwargs):
    """PUT each body from its own thread at once; the responses."""

    def put(i):
        with client_factory() as client:
            return client.put(path, json=bodies[i], **kwargs)

    responses = helpers.run_together(put, len(bodies))
    for response in responses:
        if isinstance(response, Exception):
            raise response
    return responses


def _assert_one_winner(responses):
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * (len(responses) - 1), [r.text for r in responses]
    for resp in responses:
        if resp.status_code == 409:
            assert resp.json()["errors"][0]["code"] == "placement.concurrent_update"


def test_provider_traits_one_winner(client_factory):
    with client_factory() as client:
        rp = _provider(client)
        names = ["CUSTOM_RACE_%d" % n for n in range(WRITERS)]
        for name in names:
            assert client.put("/traits/" + name).status_code == 201
        path = "/resource_providers/%s/traits" % rp
        responses = _race(
            client_factory,
            path,
            [{"traits": [name], "resource_provider_generation": 0} for name in names],
        )
        _assert_one_winner(responses)
        winner = next(r.json() for r in responses if r.status_code == 200)
        assert client.get(path).json() == winner
        assert winner["resource_provider_generation"] == 1


def test_provider_aggregates_one_winner(client_factory):
    with client_factory() as client:
        rp = _provider(client)
        path = "/resource_providers/%s/aggregates" % rp
        responses = _race(
            client_factory,
            path,
            [
                {"aggregates": [str(uuid.uuid4())], "resource_provider_generation": 0}
                for _ in range(WRITERS)
            ],
        )
        _assert_one_winner(responses)
        current = client.get(path).json()
        assert current["resource_provider_generation"] == 1
        assert len(current["aggregates"]) == 1


def test_unversioned_aggregates_never_fail_badly(client_factory):
    """Before 1.19 there is no generation: writers of the same aggregate
    either succeed or meet a clean 409, and the set ends up as sent."""
    with client_factory() as client:
        rp = _provider(client)
        path = "/resource_providers/%s/aggregates" % rp
        aggregate = str(uuid.uuid4())
        responses = _race(
            client_factory,
            path,
            [[aggregate]] * WRITERS,
            headers={"openstack-api-version": "placement 1.18"},
        )
        assert {r.status_code for r in responses} <= {200, 409}
        assert 200 in {r.status_code for r in responses}
        current = client.get(path).json()
        assert current == {"aggregates": [aggregate], "resource_provider_generation": 0}
