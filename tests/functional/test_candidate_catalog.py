"""The per-worker provider catalog: two workers (two engines and apps) on
one database. Every kind of write made through one worker changes what the
other's warm catalog answers (allocation candidates and the provider list),
exactly as the uncached SQL path would, and allocation writes leave the
catalog in place while usage and generations stay current."""

import contextlib
import uuid

import pytest
import sqlalchemy as sa

from placement import deploy
from placement.db import api as db_api
from placement.db import tables
from placement.objects import catalog
from tests import fixtures
from tests import wsgi_client

HEADERS = {"x_auth_token": "admin", "openstack_api_version": "placement latest"}
QUERIES = [
    "resources=VCPU:1,DISK_GB:10",
    "resources=VCPU:1&required=CUSTOM_GOLD",
    "resources=VCPU:1&member_of=%(agg)s",
    "resources_C=VCPU:2&resources_N=SRIOV_NET_VF:1"
    "&group_policy=none&same_subtree=_C,_N",
    "resources=VCPU:1&limit=1",
    "resources_A=VCPU:1&required_A=CUSTOM_GOLD&group_policy=isolate",
]
# The candidates, then the unfiltered provider list (also from the catalog).
PATHS = ["/allocation_candidates?" + q for q in QUERIES] + ["/resource_providers"]


@contextlib.contextmanager
def _worker(url, conf):
    engine = db_api.create_engine(url, conf)
    db = db_api.Database(engine)
    try:
        yield deploy.build_app(conf, db=db, sync_schema=False), db
    finally:
        engine.dispose()


class Cloud:
    """Two workers on one database, and the calls a test makes."""

    def __init__(self, writer, reader, reader_db):
        self.writer, self.reader, self.reader_db = writer, reader, reader_db
        self.agg = str(uuid.uuid4())

    def call(self, app, path, method="GET", body=None, status=None):
        resp = wsgi_client.call(app, path, method, body, **HEADERS)
        if status is not None:
            assert resp.status == status, resp.body
        return resp

    def write(self, path, method="PUT", body=None):
        resp = self.call(self.writer, path, method, body)
        assert resp.status < 300, resp.body
        return resp.json() if resp.body else None

    def provider(self, name, parent=None):
        rp = str(uuid.uuid4())
        self.write(
            "/resource_providers",
            "POST",
            {"name": name, "uuid": rp, "parent_provider_uuid": parent},
        )
        return rp

    def generation(self, rp):
        return self.call(self.writer, "/resource_providers/%s" % rp).json()[
            "generation"
        ]

    def inventories(self, rp, **totals):
        self.write(
            "/resource_providers/%s/inventories" % rp,
            body={
                "resource_provider_generation": self.generation(rp),
                "inventories": {rc: {"total": n} for rc, n in totals.items()},
            },
        )

    def answers(self, catalog_on):
        """Each query's body from the reading worker."""
        with fixtures.overrides(**{"placement.provider_catalog": catalog_on}):
            return [
                self.call(self.reader, path % {"agg": self.agg}, status=200).json()
                for path in PATHS
            ]

    def check(self):
        """The cached answers equal the uncached ones; returns them."""
        cached = self.answers(True)
        assert catalog._CACHES[self.reader_db].catalog.stamp == _stamp(self.reader_db)
        assert cached == self.answers(False)
        return cached


def _stamp(db):
    with db.reader() as conn:
        return db_api.catalog_stamp(conn)


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    conf = fixtures.configure()
    with fixtures.database_url(request.param) as url:
        engine = db_api.create_engine(url, conf)
        tables.metadata.create_all(engine)
        from placement.db import schema

        schema.sync_standard_names(db_api.Database(engine))
        engine.dispose()
        with (
            _worker(url, conf) as (writer, _),
            _worker(url, conf) as (reader, reader_db),
        ):
            cloud = Cloud(writer, reader, reader_db)
            cloud.call(writer, "/traits/CUSTOM_GOLD", "PUT", status=201)
            yield cloud


def _tree(cloud):
    """A compute node with a NUMA child and a NIC below it."""
    cn = cloud.provider("cn")
    cloud.inventories(cn, DISK_GB=100)
    numa = cloud.provider("numa", cn)
    cloud.inventories(numa, VCPU=4)
    nic = cloud.provider("nic", numa)
    cloud.inventories(nic, SRIOV_NET_VF=2)
    return cn, numa, nic


def _count(doc):
    return len(doc["allocation_requests"])


def test_every_structural_write_reaches_the_other_worker(cloud):
    cn, numa, nic = _tree(cloud)
    before = cloud.check()
    assert _count(before[0]) == 1 and _count(before[3]) == 1

    # A new tree (provider creation and inventories).
    host = cloud.provider("host")
    cloud.inventories(host, VCPU=8, DISK_GB=50)
    assert _count(cloud.check()[0]) == 2

    # Traits, then aggregates.
    cloud.write(
        "/resource_providers/%s/traits" % host,
        body={
            "resource_provider_generation": cloud.generation(host),
            "traits": ["CUSTOM_GOLD"],
        },
    )
    assert _count(cloud.check()[1]) == 1
    cloud.write(
        "/resource_providers/%s/aggregates" % host,
        body={
            "resource_provider_generation": cloud.generation(host),
            "aggregates": [cloud.agg],
        },
    )
    assert _count(cloud.check()[2]) == 1

    # One inventory changed, then deleted.
    cloud.write(
        "/resource_providers/%s/inventories/VCPU" % numa,
        body={"resource_provider_generation": cloud.generation(numa), "total": 1},
    )
    assert _count(cloud.check()[3]) == 0
    cloud.call(
        cloud.writer,
        "/resource_providers/%s/inventories/SRIOV_NET_VF" % nic,
        "DELETE",
        status=204,
    )
    assert _count(cloud.check()[3]) == 0

    # Re-parenting (1.37) and deletion.
    cloud.write(
        "/resource_providers/%s" % nic, body={"name": "nic", "parent_provider_uuid": cn}
    )
    cloud.check()
    cloud.call(cloud.writer, "/resource_providers/%s" % nic, "DELETE", status=204)
    cloud.call(
        cloud.writer, "/resource_providers/%s/inventories" % host, "DELETE", status=204
    )
    assert _count(cloud.check()[0]) == 1  # the first tree only


def test_sharing_provider_joins_and_leaves(cloud):
    cn, _, _ = _tree(cloud)
    cloud.call(
        cloud.writer, "/resource_providers/%s/inventories" % cn, "DELETE", status=204
    )
    assert _count(cloud.check()[0]) == 0
    san = cloud.provider("san")
    cloud.inventories(san, DISK_GB=1000)
    for rp in (cn, san):
        cloud.write(
            "/resource_providers/%s/aggregates" % rp,
            body={
                "resource_provider_generation": cloud.generation(rp),
                "aggregates": [cloud.agg],
            },
        )
    assert _count(cloud.check()[0]) == 0  # not shared yet
    cloud.write(
        "/resource_providers/%s/traits" % san,
        body={
            "resource_provider_generation": cloud.generation(san),
            "traits": ["MISC_SHARES_VIA_AGGREGATE"],
        },
    )
    assert _count(cloud.check()[0]) == 1


def test_allocations_keep_the_catalog_and_show_in_usage(cloud):
    _, numa, _ = _tree(cloud)
    cloud.check()
    cached = catalog._CACHES[cloud.reader_db].catalog
    stamp = _stamp(cloud.reader_db)
    consumer = str(uuid.uuid4())
    cloud.write(
        "/allocations/%s" % consumer,
        body={
            "allocations": {numa: {"resources": {"VCPU": 3}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    assert _stamp(cloud.reader_db) == stamp
    answers = cloud.check()
    assert catalog._CACHES[cloud.reader_db].catalog is cached
    assert _count(answers[3]) == 0  # VCPU:2 no longer fits
    summary = answers[0]["provider_summaries"][numa]
    assert summary["resources"]["VCPU"] == {"capacity": 4, "used": 3}
    listed = {p["uuid"]: p for p in answers[-1]["resource_providers"]}
    assert listed[numa]["generation"] == cloud.generation(numa)
    cloud.call(cloud.writer, "/allocations/%s" % consumer, "DELETE", status=204)
    assert _stamp(cloud.reader_db) == stamp
    assert _count(cloud.check()[3]) == 1


def test_a_worker_reading_its_catalog_leaves_others_to_sql(cloud):
    _tree(cloud)
    cache = catalog._Cache()
    with cloud.reader_db.reader() as conn:
        with cache.reading:
            assert cache.current(cloud.reader_db, conn) is None
        assert cache.current(cloud.reader_db, conn) is not None


def test_rolled_back_writes_are_not_counted(cloud):
    cn, _, _ = _tree(cloud)
    stamp = _stamp(cloud.reader_db)
    # A stale generation: 409, nothing written, nothing counted.
    resp = cloud.call(
        cloud.writer,
        "/resource_providers/%s/traits" % cn,
        "PUT",
        {"resource_provider_generation": 0, "traits": ["CUSTOM_GOLD"]},
    )
    assert resp.status == 409
    assert _stamp(cloud.reader_db) == stamp


def test_missing_shard_rows_are_recreated(cloud):
    with cloud.reader_db.writer(catalog=False) as conn:
        conn.execute(tables.catalog_changes.delete())
    assert _stamp(cloud.reader_db) == 0
    cloud.provider("lonely")
    assert _stamp(cloud.reader_db) == 1
    with cloud.reader_db.reader() as conn:
        assert (
            conn.execute(
                sa.select(sa.func.count()).select_from(tables.catalog_changes)
            ).scalar()
            == 1
        )


def test_catalog_is_read_in_one_snapshot_while_writes_commit(cloud):
    """Writes that commit between the statements of a catalog read (a new
    provider with inventory, in an aggregate with a sharing provider) are
    wholly in or wholly out of what the catalog read; the answers stay
    those of the uncached path."""
    san = cloud.provider("san")
    cloud.inventories(san, DISK_GB=1000)
    for path, body in (
        ("traits", {"traits": ["MISC_SHARES_VIA_AGGREGATE"]}),
        ("aggregates", {"aggregates": [cloud.agg]}),
    ):
        body["resource_provider_generation"] = cloud.generation(san)
        cloud.write("/resource_providers/%s/%s" % (san, path), body=body)
    late = []

    def write_first(*args):
        # Before each statement of the reading worker: commit a new
        # provider with inventory in the sharing provider's aggregate.
        if len(late) < 40:
            late.append(cloud.provider("late-%d" % len(late)))
            cloud.inventories(late[-1], VCPU=2)
            cloud.write(
                "/resource_providers/%s/aggregates" % late[-1],
                body={
                    "resource_provider_generation": 1,
                    "aggregates": [cloud.agg],
                },
            )

    sa.event.listen(cloud.reader_db.engine, "before_cursor_execute", write_first)
    try:
        cloud.call(cloud.reader, "/allocation_candidates?" + QUERIES[0], status=200)
    finally:
        sa.event.remove(cloud.reader_db.engine, "before_cursor_execute", write_first)
    assert len(late) > 3  # the catalog's statements each came after a write
    assert _count(cloud.check()[0]) == len(late)
