"""Usage in memory (issue 44): where the triggers log every writer's
allocations, the catalog holds every provider's usage and generation
(catalog/used.py), read with it and brought up to date by the log. After
every kind of write (through the API, or by SQL by hand to allocations
and consumers) the catalog's usage is what a fresh SQL read gives, and
the next answer shows it, without a statement but the stamp's."""

import uuid

import pytest
import sqlalchemy as sa

from placement.db import tables
from placement.objects.catalog import refresh
from placement.objects.catalog import store
from tests import fixtures
from tests import wsgi_client

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}
ALLOC, INV, CONSUMERS = tables.allocations, tables.inventories, tables.consumers
FLAVOR = "resources=VCPU:2,MEMORY_MB:1024"


@pytest.fixture(params=fixtures.BACKENDS)
def served(request):
    fixtures.require_backend(request.param)
    with fixtures.app(request.param) as (app, db):
        yield Cloud(app, db)


class Cloud:
    def __init__(self, app, db):
        self.app, self.db = app, db

    def call(self, path, method="GET", body=None, status=None):
        resp = wsgi_client.call(self.app, path, method, body, **HEADERS)
        if status is not None:
            assert resp.status == status, resp.body
        return resp

    def host(self, name, vcpu=8, memory=4096):
        rp = str(uuid.uuid4())
        self.call("/resource_providers", "POST", {"name": name, "uuid": rp}, status=200)
        self.call(
            "/resource_providers/%s/inventories" % rp,
            "PUT",
            {
                "resource_provider_generation": 0,
                "inventories": {
                    "VCPU": {"total": vcpu},
                    "MEMORY_MB": {"total": memory},
                },
            },
            status=200,
        )
        return rp

    def claim(self, rp, vcpu=2, memory=1024, consumer=None):
        consumer = consumer or str(uuid.uuid4())
        body = {
            "allocations": {rp: {"resources": {"VCPU": vcpu, "MEMORY_MB": memory}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }
        self.call("/allocations/%s" % consumer, "PUT", body, status=204)
        return consumer

    def candidates(self, query=FLAVOR):
        doc = self.call("/allocation_candidates?" + query, status=200).json()
        return {
            rp: summary["resources"]
            for rp, summary in doc["provider_summaries"].items()
        }

    def usages(self, rp):
        return self.call("/resource_providers/%s/usages" % rp, status=200).json()

    def capacity(self, query=FLAVOR):
        return self.call("/allocation_candidates/capacity?" + query, status=200).json()[
            "capacity"
        ]

    def sql(self, statement, **params):
        with self.db.engine.begin() as conn:
            conn.execute(statement, params)


def _held(db):
    """{(provider, class): used} of every inventory, from the catalog's
    memory (which must be current)."""
    catalog = refresh._CACHES[db].catalog
    used = catalog.used
    assert used is not None
    out = {}
    for rc, holders in used.rp.items():
        for rp, amount in zip(holders.tolist(), used.amount[rc].tolist()):
            out[rp, rc] = amount
    return out, catalog


def _fresh(db):
    """The same, summed afresh from the allocations by SQL, and every
    provider's generation."""
    with db.reader() as conn:
        used = dict(
            ((rp, rc), 0)
            for rp, rc in conn.execute(
                sa.select(INV.c.resource_provider_id, INV.c.resource_class_id)
            )
        )
        for rp, rc, amount in conn.execute(
            sa.select(
                ALLOC.c.resource_provider_id,
                ALLOC.c.resource_class_id,
                sa.func.sum(ALLOC.c.used),
            ).group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id)
        ):
            if (rp, rc) in used:
                used[rp, rc] = int(amount)
        generations = dict(
            conn.execute(
                sa.select(
                    tables.resource_providers.c.id,
                    tables.resource_providers.c.generation,
                )
            ).all()
        )
    return used, generations


def check(cloud):
    """The catalog's usage and generations, brought up to the stamp by the
    next request, are a fresh read's; and a catalog read whole holds the
    same."""
    cloud.candidates()
    held, catalog = _held(cloud.db)
    used, generations = _fresh(cloud.db)
    assert held == used
    mine = catalog.used
    assert dict(zip(mine.ids.tolist(), mine.generation.tolist())) == generations
    with cloud.db.reader() as conn:
        afresh = store.Catalog.read(conn, followed=True).used
    for rc in afresh.rp:
        assert afresh.rp[rc].tolist() == mine.rp[rc].tolist()
        assert afresh.amount[rc].tolist() == mine.amount[rc].tolist()
    assert afresh.rp.keys() == mine.rp.keys()


def test_claims_and_sql_by_hand_reach_memory(served):
    cloud = served
    a, b = cloud.host("a"), cloud.host("b")
    assert refresh.logged_by_triggers(cloud.db)
    check(cloud)
    first = cloud.claim(a)
    check(cloud)
    assert cloud.usages(a)["usages"] == {"VCPU": 2, "MEMORY_MB": 1024}
    assert cloud.capacity() == 3 + 4
    # A move: the consumer's allocations from a to b.
    held = cloud.call("/allocations/%s" % first, status=200).json()
    moved = {
        "allocations": {b: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}}},
        "project_id": str(uuid.uuid4()),
        "user_id": str(uuid.uuid4()),
        "consumer_generation": held["consumer_generation"],
        "consumer_type": "INSTANCE",
    }
    cloud.call("/allocations/%s" % first, "PUT", moved, status=204)
    check(cloud)
    assert cloud.usages(a)["usages"]["VCPU"] == 0
    assert cloud.usages(b)["usages"]["VCPU"] == 2
    # SQL by hand: an allocation's amount changed, then deleted, then one
    # added for a consumer row deleted by hand.
    ids = _ids(cloud.db)
    cloud.sql(
        ALLOC.update()
        .where(ALLOC.c.consumer_id == first, ALLOC.c.resource_class_id == _vcpu(cloud))
        .values(used=6)
    )
    assert cloud.usages(b)["usages"]["VCPU"] == 6
    assert cloud.capacity() == 4 + 1
    check(cloud)
    cloud.sql(ALLOC.delete().where(ALLOC.c.consumer_id == first))
    cloud.sql(CONSUMERS.delete().where(CONSUMERS.c.uuid == first))
    assert cloud.usages(b)["usages"]["VCPU"] == 0
    check(cloud)
    cloud.sql(
        ALLOC.insert().values(
            resource_provider_id=ids[a],
            consumer_id=str(uuid.uuid4()),
            resource_class_id=_vcpu(cloud),
            used=8,
        )
    )
    # a is full: no candidate there, and the capacity says so.
    assert set(cloud.candidates()) == {b}
    assert cloud.capacity() == 4
    check(cloud)
    # A provider's generation bumped by hand shows in its usages.
    generation = cloud.usages(a)["resource_provider_generation"]
    cloud.sql(
        tables.resource_providers.update()
        .where(tables.resource_providers.c.id == ids[a])
        .values(generation=generation + 5)
    )
    assert cloud.usages(a)["resource_provider_generation"] == generation + 5
    check(cloud)
    # An inventory gone and back keeps the usage aligned.
    cloud.call("/resource_providers/%s/inventories/MEMORY_MB" % b, "DELETE", status=204)
    check(cloud)
    cloud.call("/resource_providers/%s" % b, "DELETE", status=204)
    check(cloud)
    cloud.call("/resource_providers/%s/usages" % b, status=404)


def _ids(db):
    with db.reader() as conn:
        return dict(
            conn.execute(
                sa.select(
                    tables.resource_providers.c.uuid, tables.resource_providers.c.id
                )
            ).all()
        )


def _vcpu(cloud):
    with cloud.db.reader() as conn:
        return conn.execute(
            sa.select(tables.resource_classes.c.id).where(
                tables.resource_classes.c.name == "VCPU"
            )
        ).scalar_one()
