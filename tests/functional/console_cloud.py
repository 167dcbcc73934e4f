"""A live placement-api for the console tests (test_console*.py), and
providers and consumers made through its API."""

import contextlib
import typing
import uuid

import httpx

from tests import fixtures
from tests.functional import live_server

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


class Live(typing.NamedTuple):
    base: str  # the server's URL
    url: str  # its database's URL
    client: httpx.Client  # on ``base``


@contextlib.contextmanager
def live_api(workdir, backend):
    """Yield a Live: the real ``placement-api`` (one worker, noauth2) on a
    fresh ``backend`` database it syncs at start, its log in ``workdir``;
    stop it afterwards."""
    with (
        fixtures.database_url(backend) as url,
        live_server.placement_api(
            str(workdir),
            "--workers",
            "1",
            "--db-sync",
            OS_API__AUTH_STRATEGY="noauth2",
            OS_PLACEMENT_DATABASE__CONNECTION=url,
        ) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        yield Live(base, url, client)


def create(client, name, parent=None, inventories=None, traits=(), aggregates=()):
    """A provider ``name`` (under the provider uuid ``parent``): its uuid."""
    rp = str(uuid.uuid4())
    body = {"name": name, "uuid": rp}
    if parent:
        body["parent_provider_uuid"] = parent
    resp = client.post("/resource_providers", json=body, headers=ADMIN)
    assert resp.status_code == 200, resp.text
    generation = resp.json()["generation"]
    if inventories:
        generation = _put(client, rp, "inventories", generation, inventories)
    if traits:
        for trait in traits:
            client.put("/traits/" + trait, headers=ADMIN)
        generation = _put(client, rp, "traits", generation, list(traits))
    if aggregates:
        _put(client, rp, "aggregates", generation, list(aggregates))
    return rp


def _put(client, rp, part, generation, value):
    """PUT the provider's ``part`` (inventories, traits, aggregates): its
    new generation."""
    resp = client.put(
        "/resource_providers/%s/%s" % (rp, part),
        json={"resource_provider_generation": generation, part: value},
        headers=ADMIN,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["resource_provider_generation"]


def claim(client, allocations):
    """A new consumer of project p-console, user u-console, holding
    ``allocations`` ({provider uuid: {class: amount}}): its uuid."""
    consumer = str(uuid.uuid4())
    resp = client.put(
        "/allocations/" + consumer,
        json={
            "allocations": {
                rp: {"resources": resources} for rp, resources in allocations.items()
            },
            "project_id": "p-console",
            "user_id": "u-console",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
        headers=ADMIN,
    )
    assert resp.status_code == 204, resp.text
    return consumer
