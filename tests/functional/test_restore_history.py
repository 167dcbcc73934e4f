"""A restore brings the change log's counts back; new writes by another
writer then take them up again, to the counts a worker's catalog holds or
past them, before the worker looks. The counts' tokens
(catalog_changes.token) tell that history from the catalog's: the worker
reads its catalog whole, and answers show the new writes ("Currency" in
doc/architecture.md). Deterministic: the restore and the other writer's
claims are SQL by hand, on one connection (so one shard of the counts)."""

import uuid

import pytest
import sqlalchemy as sa

from placement.db import tables
from tests import fixtures
from tests import wsgi_client

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}
CHANGES, LOG = tables.catalog_changes, tables.catalog_log
RP, ALLOC, CONSUMERS = (
    tables.resource_providers,
    tables.allocations,
    tables.consumers,
)


def _call(app, path, method="GET", body=None, status=200):
    resp = wsgi_client.call(app, path, method=method, body=body, **HEADERS)
    assert resp.status == status, (method, path, resp.status, resp.body)
    return resp


def _allocations(app, consumer):
    return _call(app, "/allocations/%s" % consumer).json()["allocations"]


def _claim_by_hand(conn, rp_id, like):
    """Another writer's claim of one VCPU of ``rp_id`` (as the consumer
    ``like``'s), committed: its consumer's uuid."""
    consumer = str(uuid.uuid4())
    with conn.begin():
        conn.execute(
            CONSUMERS.insert().values(
                uuid=consumer,
                project_id=like.project_id,
                user_id=like.user_id,
                consumer_type_id=like.consumer_type_id,
            )
        )
        conn.execute(
            ALLOC.insert().values(
                resource_provider_id=rp_id,
                consumer_id=consumer,
                resource_class_id=0,  # VCPU
                used=1,
            )
        )
        conn.execute(
            RP.update().where(RP.c.id == rp_id).values(generation=RP.c.generation + 1)
        )
    return consumer


def _stamp(conn):
    return conn.execute(sa.select(sa.func.sum(CHANGES.c.changes))).scalar_one()


@pytest.mark.parametrize("claims", [1, 2], ids=["same-counts", "past-them"])
@pytest.mark.parametrize("backend", fixtures.BACKENDS)
def test_writes_after_a_restore_that_brought_the_counts_back(backend, claims):
    fixtures.require_backend(backend)
    with fixtures.app(backend) as (app, db), db.engine.connect() as hand:
        rp = str(uuid.uuid4())
        _call(app, "/resource_providers", "POST", {"name": "host", "uuid": rp})
        _call(
            app,
            "/resource_providers/%s/inventories" % rp,
            "PUT",
            {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}},
        )
        first = str(uuid.uuid4())
        _call(
            app,
            "/allocations/%s" % first,
            "PUT",
            {
                "allocations": {rp: {"resources": {"VCPU": 1}}},
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
            status=204,
        )
        assert rp in _allocations(app, first)
        with hand.begin():
            rp_id, generation = hand.execute(
                sa.select(RP.c.id, RP.c.generation).where(RP.c.uuid == rp)
            ).one()
            like = hand.execute(
                sa.select(CONSUMERS).where(CONSUMERS.c.uuid == first)
            ).one()
            # The backup: the counts, their tokens and the log.
            counts = hand.execute(sa.select(CHANGES)).mappings().all()
            log = hand.execute(sa.select(LOG)).mappings().all()

        # A claim after the backup, which the catalog follows.
        lost = _claim_by_hand(hand, rp_id, like)
        assert rp in _allocations(app, lost)
        with hand.begin():
            held = _stamp(hand)

        # The restore: the claim's rows gone, the counts and log as backed up.
        with hand.begin():
            hand.execute(ALLOC.delete().where(ALLOC.c.consumer_id == lost))
            hand.execute(CONSUMERS.delete().where(CONSUMERS.c.uuid == lost))
            hand.execute(
                RP.update().where(RP.c.id == rp_id).values(generation=generation)
            )
            hand.execute(CHANGES.delete())
            hand.execute(CHANGES.insert(), [dict(r) for r in counts])
            hand.execute(LOG.delete())
            hand.execute(LOG.insert(), [dict(r) for r in log])

        # Another writer's claims, on the same connection (the same shard):
        # one takes the counts back to the catalog's, two past them.
        new = [_claim_by_hand(hand, rp_id, like) for _ in range(claims)]
        with hand.begin():
            assert (_stamp(hand) == held) is (claims == 1)

        for consumer in new:
            assert rp in _allocations(app, consumer)
        assert _allocations(app, lost) == {}
        usages = _call(app, "/resource_providers/%s/usages" % rp).json()["usages"]
        assert usages == {"VCPU": 1 + claims}
