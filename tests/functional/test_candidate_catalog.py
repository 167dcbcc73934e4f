"""The per-worker provider catalog: two workers (two engines and apps) on
one database. Every kind of write made through one worker changes what the
other's warm catalog answers (allocation candidates and the provider list),
exactly as the uncached SQL path would, by following the change log (never
reading the catalog whole again, and ending equal to a catalog read
afresh); allocation writes leave the catalog in place while usage and
generations stay current. A seeded random interleaving of every kind of
write and read through both workers holds the same."""

import concurrent.futures
import contextlib
import random
import threading
import time
import uuid

import prometheus_client
import pytest
import sqlalchemy as sa

from placement import arrival
from placement import deploy
from placement.db import api as db_api
from placement.db import schema
from placement.db import tables
from placement.objects import common
from placement.objects import standard_names
from placement.objects.allocation_candidates import answering
from placement.objects.allocation_candidates import catalog_index
from placement.objects.allocation_candidates import trees
from placement.objects.catalog import changes
from placement.objects.catalog import deltas
from placement.objects.catalog import fingerprint
from placement.objects.catalog import refresh
from placement.objects.catalog import store
from placement.objects.catalog import verify
from tests import fixtures
from tests import wsgi_client
from tests.functional import test_resource_provider_objects as rp_objects

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
# The candidates, the lists of an aggregate's providers with a trait (from
# the catalog when there are none), then the unfiltered provider list
# (also from the catalog).
PATHS = ["/allocation_candidates?" + q for q in QUERIES] + [
    "/resource_providers?member_of=in:%(agg)s&required=CUSTOM_GOLD",
    "/resource_providers?member_of=in:%(agg)s&required=MISC_SHARES_VIA_AGGREGATE",
    "/resource_providers",
]
# A provider's rows (from the catalog, after the look), at the
# microversions nova's report client reads them, and with their times
# (tools/bench/heartbeat.py's 1.39).
ROWS = [
    ("/inventories", "1.0"),
    ("/traits", "1.6"),
    ("/aggregates", "1.19"),
    ("/inventories", "1.39"),
    ("/traits", "1.39"),
]


@contextlib.contextmanager
def _worker(url, conf):
    engine = db_api.create_engine(url, conf)
    db = db_api.Database(engine, conf)
    try:
        yield deploy.build_app(conf, db=db, sync_schema=False), db
    finally:
        engine.dispose()


class Cloud:
    """Two workers on one database, and the calls a test makes."""

    def __init__(self, writer, writer_db, reader, reader_db):
        self.writer, self.writer_db = writer, writer_db
        self.reader, self.reader_db = reader, reader_db
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
        """The provider's generation (None if it is gone), read by SQL: a
        GET through either worker would bring (and count) its catalog."""
        with self.writer_db.engine.connect() as conn:
            return conn.execute(
                sa.select(RP.c.generation).where(RP.c.uuid == rp)
            ).scalar()

    def inventories(self, rp, **totals):
        self.write(
            "/resource_providers/%s/inventories" % rp,
            body={
                "resource_provider_generation": self.generation(rp),
                "inventories": {rc: {"total": n} for rc, n in totals.items()},
            },
        )

    def answers(self, catalog_on, reader=None):
        """Each query's body from the reading worker, then each listed
        provider's ROWS, as nova reads them: status, body and the rows'
        latest time (not "now": aggregates, no traits)."""
        reader = reader or self.reader
        with fixtures.overrides(**{"placement.provider_catalog": catalog_on}):
            found = [
                self.call(reader, path % {"agg": self.agg}, status=200).json()
                for path in PATHS
            ]
            for provider in found[len(PATHS) - 1]["resource_providers"]:
                for path, version in ROWS:
                    resp = wsgi_client.call(
                        reader,
                        "/resource_providers/%s%s" % (provider["uuid"], path),
                        x_auth_token="admin",
                        openstack_api_version="placement " + version,
                    )
                    timed = (
                        path != "/aggregates"
                        and resp.status == 200
                        and resp.json().get("traits", True)
                    )
                    found.append(
                        (
                            resp.status,
                            resp.body,
                            resp.headers.get("last-modified") if timed else None,
                        )
                    )
            return found

    def check(self, reader=None, reader_db=None):
        """The cached answers (of the reading worker, or ``reader`` on
        ``reader_db``) equal the uncached ones, and its catalog, once read,
        followed the changes by their deltas to what a fresh read gives;
        returns the answers."""
        reader, reader_db = reader or self.reader, reader_db or self.reader_db
        cache = refresh._CACHES.get(reader_db)
        first = cache is None or cache.catalog is None
        full_reads = _full_reads()
        cached = self.answers(True, reader)
        if not first:
            assert _full_reads() == full_reads
        assert refresh._CACHES[reader_db].catalog.stamp == _stamp(reader_db)
        catalog = refresh._CACHES[reader_db].catalog
        with reader_db.reader() as conn:
            afresh = store.Catalog.read(conn, followed=catalog.used is not None)
            # What the index derived per tree and kept through the changes
            # is what it derives afresh.
            derive = catalog_index.CatalogIndex(conn, afresh).idle_summaries
            for root, derived in catalog.derived_by_tree.items():
                if derived.idle is not None:
                    assert derived.idle == derive([root], {}, ())
            # So are the roots it kept per trait and aggregate.
            for (field, value), roots in catalog.value_roots.items():
                assert roots == afresh.roots_of(field, value), (field, value)
            # A whole read made every one (from the columns): each the
            # roots of its holders.
            every = afresh.providers
            for field, holders in (
                ("traits", afresh.trait_holders),
                ("aggregates", afresh.aggregate_members),
            ):
                for value, rps in holders.items():
                    assert afresh.value_roots[field, value] == {
                        every[rp].root_id for rp in rps
                    }, (field, value)
        assert _contents(catalog) == _contents(afresh)
        assert catalog.aggregate_uuids() == afresh.aggregate_uuids()
        # Usage and generations followed through the changes (where the
        # triggers log them) are a fresh read's.
        assert _usage(catalog.used) == _usage(afresh.used)
        assert (catalog.used is not None) == refresh.logged_by_triggers(reader_db)
        # The fingerprint kept up to date through the changes is the one
        # computed afresh, and the database's.
        dialect = reader_db.dialect
        if catalog.content is not None:
            assert catalog.fingerprint(dialect) == afresh.fingerprint(dialect)
        with reader_db.reader() as conn:
            assert afresh.fingerprint(dialect) == fingerprint.of_database(conn)
        assert cached == self.answers(False, reader)
        return cached


def _stamp(db):
    with db.reader() as conn:
        return changes.stamp(conn)


def _full_reads():
    return _updates("full")


def _updates(how):
    """Catalog updates of this process so far that were ``how``."""
    return (
        prometheus_client.REGISTRY.get_sample_value(
            "placement_catalog_updates_total", {"how": how}
        )
        or 0
    )


def _contents(cached):
    """Everything a catalog holds, lists in order."""
    return {
        name: _ordered(value)
        for name, value in vars(cached).items()
        # What is derived from the rest (the fingerprint is compared on
        # its own).
        if name
        not in (
            "derived_by_tree",
            "value_roots",
            "shapes",
            "content",
            "hashed",
            "offset",
            "columns",
            "structure",
            "used",
            "_aggregate_uuids",
        )
    }


def _usage(used):
    """A catalog's usage and generations as plain values (None: none)."""
    if used is None:
        return None
    return (
        {
            rc: (holders.tolist(), used.amount[rc].tolist())
            for rc, holders in used.rp.items()
        },
        used.ids.tolist(),
        used.generation.tolist(),
        used.modified.tolist(),
        used.inventoried.tolist(),
    )


def _ordered(value):
    if isinstance(value, dict):
        return {k: _ordered(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted(value)
    return value


@contextlib.contextmanager
def two_workers(writer_url, reader_url, triggers=True):
    """A Cloud of two workers on one empty database, reached through the
    given URLs (the same, or two nodes of a cluster); without the
    change-log triggers (``triggers=False``): the fallback."""
    conf = fixtures.configure()
    engine = db_api.create_engine(writer_url, conf)
    schema.create_at_head(engine)
    if not triggers:
        fixtures.drop_triggers(engine)
    standard_names.sync_standard_names(db_api.Database(engine, conf))
    engine.dispose()
    with (
        _worker(writer_url, conf) as (writer, writer_db),
        _worker(reader_url, conf) as (reader, reader_db),
    ):
        cloud = Cloud(writer, writer_db, reader, reader_db)
        cloud.call(writer, "/traits/CUSTOM_GOLD", "PUT", status=201)
        yield cloud


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with fixtures.database_url(request.param) as url, two_workers(url, url) as cloud:
        yield cloud


@pytest.fixture(params=fixtures.BACKENDS)
def fallback_cloud(request):
    """A Cloud without the triggers: usage is read per request."""
    fixtures.require_backend(request.param)
    with (
        fixtures.database_url(request.param) as url,
        two_workers(url, url, triggers=False) as cloud,
    ):
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


def test_a_changed_amount_keeps_its_class_holders(cloud):
    """A host's changed total (a heartbeat's PUT) is followed without a
    copy of its class's holders, which stay the catalog's before (the
    answers and maps checked against a fresh read as ever)."""
    _tree(cloud)
    rp = cloud.provider("cn2")
    cloud.inventories(rp, VCPU=8, DISK_GB=100)
    cloud.check()
    before = refresh._CACHES[cloud.reader_db].catalog
    cloud.inventories(rp, VCPU=16, DISK_GB=100)
    cloud.check()
    after = refresh._CACHES[cloud.reader_db].catalog
    assert after is not before
    vcpu = after.class_ids["VCPU"]
    assert after.holders[vcpu] is before.holders[vcpu]
    assert after.idle[vcpu] != before.idle[vcpu]


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
    cached = refresh._CACHES[cloud.reader_db].catalog
    stamp = _stamp(cloud.reader_db)
    consumer = _claim(cloud, numa, VCPU=3)
    # The triggers count the claim (usage, consumer, generation): the
    # catalog follows only its counts, its structure kept.
    assert _stamp(cloud.reader_db) > stamp
    answers = cloud.check()
    catalog = refresh._CACHES[cloud.reader_db].catalog
    assert catalog.structure is cached.structure
    # What was derived per tree is kept; usage is followed in memory.
    assert catalog.derived_by_tree is cached.derived_by_tree
    assert catalog.used is not cached.used
    assert _count(answers[3]) == 0  # VCPU:2 no longer fits
    summary = answers[0]["provider_summaries"][numa]
    assert summary["resources"]["VCPU"] == {"capacity": 4, "used": 3}
    listed = {p["uuid"]: p for p in answers[len(PATHS) - 1]["resource_providers"]}
    assert listed[numa]["generation"] == cloud.generation(numa)
    cloud.call(cloud.writer, "/allocations/%s" % consumer, "DELETE", status=204)
    assert _count(cloud.check()[3]) == 1
    assert refresh._CACHES[cloud.reader_db].catalog.structure is cached.structure


def _claim(cloud, provider, **resources):
    """A new consumer's allocation of ``resources`` on ``provider``; its uuid."""
    consumer = str(uuid.uuid4())
    cloud.write(
        "/allocations/%s" % consumer,
        body={
            "allocations": {provider: {"resources": resources}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    return consumer


def test_each_tree_is_worked_out_once_per_shape_and_usage(cloud, monkeypatch):
    """A repeated request plans no tree again; a claim makes its tree's
    candidates worked out again, and only that tree's."""
    _tree(cloud)
    host = cloud.provider("host")
    cloud.inventories(host, VCPU=8, DISK_GB=50)
    planned = []
    plans = trees.Trees.plans

    def spy(forest, groups):
        planned.append(len(forest.anchor_ok))
        return plans(forest, groups)

    monkeypatch.setattr(trees.Trees, "plans", spy)
    first = cloud.call(cloud.reader, PATHS[0], status=200).json()
    assert planned == [2] and _count(first) == 2
    assert cloud.call(cloud.reader, PATHS[0], status=200).json() == first
    assert planned == [2]
    _claim(cloud, host, VCPU=8)
    assert _count(cloud.check()[0]) == 1  # the host is full
    assert planned[:2] == [2, 1]


def test_a_worker_reading_its_catalog_leaves_others_to_sql(cloud):
    _tree(cloud)
    cache = refresh.Cache()
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
    with cloud.reader_db.writer() as conn:
        conn.execute(tables.catalog_changes.delete())
    assert _stamp(cloud.reader_db) == 0
    cloud.provider("lonely")
    # The triggers count each row, the service its transaction: all in the
    # connection's shard.
    assert _stamp(cloud.reader_db) >= 1
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


def _outcomes():
    return {
        outcome: prometheus_client.REGISTRY.get_sample_value(
            "placement_catalog_requests_total", {"outcome": outcome}
        )
        or 0
        for outcome in ("hit", "read", "sql")
    }


def test_writes_while_the_catalog_catches_up_do_not_cost_a_hit(cloud):
    """On a database whose transactions see each statement's latest commits
    (MySQL, PostgreSQL at READ COMMITTED), writes that commit while a
    request brings the catalog up to date are caught up with too: the
    request uses the catalog, and answers as the uncached path does."""
    if cloud.reader_db.dialect == "sqlite":
        pytest.skip("a SQLite transaction reads one snapshot throughout")
    cn, numa, nic = _tree(cloud)
    cloud.check()  # the reader's catalog is read
    cloud.inventories(cn, DISK_GB=200)  # it is one change behind
    counts, late = [], []

    def write_meanwhile(conn, cursor, statement, *args):
        # The request reads the change count, the catalog's update reads
        # the counts again, then the request reads its count once more: a
        # write commits before each of the last two.
        if "FROM catalog_changes" in statement:
            counts.append(statement)
            if len(counts) in (2, 3):
                late.append(cloud.provider("late-%d" % len(late)))
                cloud.inventories(late[-1], VCPU=2, DISK_GB=10)

    before = _outcomes()
    sa.event.listen(cloud.reader_db.engine, "before_cursor_execute", write_meanwhile)
    try:
        cached = cloud.call(
            cloud.reader, "/allocation_candidates?" + QUERIES[0], status=200
        ).json()
    finally:
        sa.event.remove(
            cloud.reader_db.engine, "before_cursor_execute", write_meanwhile
        )
    after = _outcomes()
    assert len(late) == 2
    assert {o: after[o] - before[o] for o in after} == {"hit": 1, "read": 0, "sql": 0}
    assert cached == cloud.answers(False)[0]
    assert set(late) <= cached["provider_summaries"].keys()


CLASSES = ["VCPU", "DISK_GB", "SRIOV_NET_VF", "CUSTOM_FPGA"]
RP, RC = tables.resource_providers, tables.resource_classes
ALLOC, CONSUMERS = tables.allocations, tables.consumers
TRAITS = [
    "CUSTOM_GOLD",
    "CUSTOM_SILVER",
    "HW_CPU_X86_AVX2",
    "MISC_SHARES_VIA_AGGREGATE",
]


class RandomCloud:
    """Random writes of every kind through a random worker of ``cloud``.
    Refused ones (409, 400: in use, a loop...) change nothing, which is
    fine: the answers are compared with the uncached path either way."""

    def __init__(self, cloud, rng):
        self.cloud, self.rng = cloud, rng
        self.aggs = [cloud.agg, str(uuid.uuid4())]
        self.providers, self.consumers = [], []

    def send(self, path, method="PUT", body=None):
        app = self.rng.choice([self.cloud.writer, self.cloud.reader])
        resp = self.cloud.call(app, path, method, body)
        assert resp.status < 500, resp.body
        return resp

    def some(self, items):
        return self.rng.sample(items, self.rng.randint(0, len(items)))

    def generation(self, rp):
        return self.cloud.generation(rp) or 0

    def provider(self):
        rp = str(uuid.uuid4())
        parent = self.rng.choice(self.providers) if self.providers else None
        if self.rng.random() < 0.5:
            parent = None
        body = {"name": rp, "uuid": rp, "parent_provider_uuid": parent}
        if self.send("/resource_providers", "POST", body).status == 200:
            self.providers.append(rp)
            self.inventories(rp)

    def inventories(self, rp=None):
        rp = rp or self.rng.choice(self.providers)
        self.send(
            "/resource_providers/%s/inventories" % rp,
            body={
                "resource_provider_generation": self.generation(rp),
                "inventories": {
                    rc: {"total": self.rng.randint(1, 8)} for rc in self.some(CLASSES)
                },
            },
        )

    def inventory(self):
        rp, rc = self.rng.choice(self.providers), self.rng.choice(CLASSES)
        path = "/resource_providers/%s/inventories/%s" % (rp, rc)
        if self.rng.random() < 0.5:
            self.send(path, "DELETE")
        else:
            body = {"resource_provider_generation": self.generation(rp), "total": 6}
            self.send(path, body=body)

    def traits(self):
        rp = self.rng.choice(self.providers)
        self.send(
            "/resource_providers/%s/traits" % rp,
            body={
                "resource_provider_generation": self.generation(rp),
                "traits": self.some(TRAITS),
            },
        )

    def aggregates(self):
        rp = self.rng.choice(self.providers)
        self.send(
            "/resource_providers/%s/aggregates" % rp,
            body={
                "resource_provider_generation": self.generation(rp),
                "aggregates": self.some(self.aggs),
            },
        )

    def move(self):
        rp = self.rng.choice(self.providers)
        parent = self.rng.choice(self.providers + [None])
        body = {"name": "moved-%s" % rp, "parent_provider_uuid": parent}
        self.send("/resource_providers/%s" % rp, body=body)

    def delete(self):
        rp = self.rng.choice(self.providers)
        if self.send("/resource_providers/%s" % rp, "DELETE").status == 204:
            self.providers.remove(rp)

    def names(self):
        kind = self.rng.choice(["resource_classes", "traits"])
        name = "CUSTOM_FPGA" if kind == "resource_classes" else "CUSTOM_SILVER"
        self.send("/%s/%s" % (kind, name), self.rng.choice(["PUT", "DELETE"]))

    def allocate(self):
        if self.consumers and self.rng.random() < 0.4:
            consumer = self.consumers.pop(self.rng.randrange(len(self.consumers)))
            self.send("/allocations/%s" % consumer, "DELETE")
            return
        consumer = str(uuid.uuid4())
        rp = self.rng.choice(self.providers)
        body = {
            "allocations": {rp: {"resources": {self.rng.choice(CLASSES): 1}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }
        if self.send("/allocations/%s" % consumer, body=body).status == 204:
            self.consumers.append(consumer)

    def reshape(self):
        """A consumer's allocations moved onto a provider whose inventory
        the same request replaces (POST /reshaper)."""
        if not self.consumers:
            return
        consumer, rp = self.rng.choice(self.consumers), self.rng.choice(self.providers)
        held = self.cloud.call(self.cloud.writer, "/allocations/%s" % consumer)
        rc = self.rng.choice(CLASSES)
        self.send(
            "/reshaper",
            "POST",
            {
                "inventories": {
                    rp: {
                        "resource_provider_generation": self.generation(rp),
                        "inventories": {rc: {"total": self.rng.randint(2, 8)}},
                    }
                },
                "allocations": {
                    consumer: {
                        "allocations": {rp: {"resources": {rc: 1}}},
                        "project_id": held.json().get("project_id", "p"),
                        "user_id": held.json().get("user_id", "u"),
                        "consumer_generation": held.json().get("consumer_generation"),
                    }
                },
            },
        )

    def by_hand(self):
        """SQL by hand to allocations and consumers, as another writer
        (the triggers log it; without them usage is read per request)."""
        with self.cloud.writer_db.engine.begin() as conn:
            ids = dict(conn.execute(sa.select(RP.c.uuid, RP.c.id)).all())
            classes = dict(conn.execute(sa.select(RC.c.name, RC.c.id)).all())
            what = self.rng.randrange(3)
            if what == 0 and self.consumers:
                conn.execute(
                    ALLOC.update()
                    .where(ALLOC.c.consumer_id == self.rng.choice(self.consumers))
                    .values(used=self.rng.randint(1, 3))
                )
            elif what == 1 and self.consumers:
                consumer = self.consumers.pop(self.rng.randrange(len(self.consumers)))
                conn.execute(ALLOC.delete().where(ALLOC.c.consumer_id == consumer))
                conn.execute(CONSUMERS.delete().where(CONSUMERS.c.uuid == consumer))
            else:
                rp = ids.get(self.rng.choice(self.providers))
                rc = classes.get(self.rng.choice(CLASSES))
                if rp is None or rc is None:
                    return
                conn.execute(
                    ALLOC.insert().values(
                        resource_provider_id=rp,
                        consumer_id=str(uuid.uuid4()),
                        resource_class_id=rc,
                        used=self.rng.randint(1, 2),
                    )
                )

    def step(self):
        if len(self.providers) < 3:
            return self.provider()
        action = self.rng.choice(
            [
                self.provider,
                self.inventories,
                self.inventory,
                self.traits,
                self.aggregates,
                self.move,
                self.delete,
                self.names,
                self.allocate,
                self.reshape,
                self.by_hand,
            ]
        )
        action()


def random_day(cloud, steps):
    """``steps`` seeded random writes of every kind through either worker
    of ``cloud``, read between them through one or the other: each
    worker's catalog follows the writes by their deltas (never read whole
    again) and answers as the uncached path does."""
    rng = random.Random(20261123)
    cloud.call(cloud.writer, "/resource_classes/CUSTOM_FPGA", "PUT", status=201)
    writes = RandomCloud(cloud, rng)
    workers = [(cloud.writer, cloud.writer_db), (cloud.reader, cloud.reader_db)]
    for worker in workers:
        cloud.check(*worker)  # each catalog read, whole, once
    full_reads, deltas = _full_reads(), _updates("deltas")
    for _ in range(steps):
        writes.step()
        if rng.random() < 0.4:
            cloud.check(*rng.choice(workers))
    for worker in workers:
        cloud.check(*worker)
    assert _full_reads() == full_reads
    assert _updates("deltas") > deltas


def test_random_writes_and_reads_through_both_workers(cloud):
    random_day(cloud, steps=300)


def test_random_writes_without_the_triggers(fallback_cloud):
    random_day(fallback_cloud, steps=150)


def test_catalog_read_whole_when_the_log_cannot_tell(cloud, monkeypatch):
    """A worker whose catalog is older than what the log keeps (pruned),
    or that sees a write of EVERYTHING, reads the catalog whole again and
    still answers as the uncached path."""
    cn, _, _ = _tree(cloud)
    cloud.check()
    monkeypatch.setattr(changes, "LOG_KEPT", 1)
    monkeypatch.setattr(changes, "PRUNE_EVERY", 1)
    monkeypatch.setattr(changes.random, "randrange", lambda n: 0)
    for _ in range(3):
        cloud.inventories(cloud.provider(str(uuid.uuid4())), VCPU=2)
    full_reads = _full_reads()
    assert len(cloud.answers(True)[len(PATHS) - 1]["resource_providers"]) == 6
    assert _full_reads() == full_reads + 1
    cloud.check()
    with cloud.writer_db.writer() as conn:
        changes.record(conn, changes.EVERYTHING)
    cloud.answers(True)
    assert _full_reads() == full_reads + 2
    cloud.check()


def test_concurrent_writers_leave_no_gap(cloud):
    """Writers through both workers at once, while the reading worker
    keeps answering: each shard's changes commit in order and without
    gaps, so the reader follows them all by their deltas."""
    hosts = [cloud.provider("host-%d" % n) for n in range(8)]
    cloud.check()
    full_reads = _full_reads()

    def report(host):
        for total in range(1, 9):
            app = cloud.writer if total % 2 else cloud.reader
            for _ in range(20):
                body = {
                    "resource_provider_generation": cloud.generation(host),
                    "inventories": {"VCPU": {"total": total}},
                }
                resp = cloud.call(
                    app, "/resource_providers/%s/inventories" % host, "PUT", body
                )
                if resp.status != 409:  # lost to a reading of its generation
                    break
            assert resp.status == 200, resp.body

    def read(done):
        while not done.is_set():
            cloud.call(cloud.reader, "/allocation_candidates?" + QUERIES[4], status=200)

    done = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        reading = pool.submit(read, done)
        list(pool.map(report, hosts))
        done.set()
        reading.result()
    cloud.check()
    assert _full_reads() == full_reads


# One write per table the catalog keeps, that records nothing (a forgotten
# ``changes.record``); the provider's own id fills in the ``rp`` keys.
UNRECORDED_WRITES = {
    "resource_providers": lambda rp: (
        tables.resource_providers.update()
        .where(tables.resource_providers.c.id == rp)
        .values(name="renamed")
    ),
    "inventories": lambda rp: tables.inventories.delete().where(
        tables.inventories.c.resource_provider_id == rp
    ),
    "resource_provider_traits": lambda rp: (
        tables.resource_provider_traits.insert().from_select(
            ["resource_provider_id", "trait_id"],
            sa.select(sa.literal(rp), tables.traits.c.id).where(
                tables.traits.c.name == "CUSTOM_GOLD"
            ),
        )
    ),
    "resource_provider_aggregates": lambda rp: (
        tables.resource_provider_aggregates.delete().where(
            tables.resource_provider_aggregates.c.resource_provider_id == rp
        )
    ),
    "placement_aggregates": lambda rp: tables.placement_aggregates.insert().values(
        uuid=str(uuid.uuid4())
    ),
    "resource_classes": lambda rp: tables.resource_classes.insert().values(
        id=20000 + rp, name="CUSTOM_UNRECORDED"
    ),
    "traits": lambda rp: tables.traits.insert().values(name="CUSTOM_UNRECORDED"),
}


@pytest.mark.parametrize("table", sorted(UNRECORDED_WRITES))
def test_a_write_that_records_nothing_is_caught(cloud, monkeypatch, table):
    """The watcher sees every write of the catalog's tables: one whose
    write path recorded no change is reported (the tests fail on it) and
    logged as EVERYTHING, so every worker still ends at the right catalog;
    a generation swap alone (an allocation write) is no change of it."""
    cn, _, _ = _tree(cloud)
    cloud.write(
        "/resource_providers/%s/aggregates" % cn,
        body={
            "aggregates": [cloud.agg],
            "resource_provider_generation": cloud.generation(cn),
        },
    )
    cloud.check()
    reported = []
    monkeypatch.setattr(changes, "on_unrecorded", reported.append)
    with cloud.writer_db.reader() as conn:
        rp = conn.scalar(
            sa.select(tables.resource_providers.c.id).where(
                tables.resource_providers.c.uuid == cn
            )
        )
        counts = changes.counts(conn)
    with cloud.writer_db.writer() as conn:
        generation = conn.scalar(
            sa.select(tables.resource_providers.c.generation).where(
                tables.resource_providers.c.id == rp
            )
        )
        common.swap_generations(conn, {rp: generation})
    assert reported == []
    with cloud.writer_db.reader() as conn:
        # Only the triggers' GENERATION, which changes nothing kept.
        logged = deltas.changed(conn, counts, changes.counts(conn))
    assert logged == {changes.GENERATION: {rp}}
    full_reads = _full_reads()
    with cloud.writer_db.writer() as conn:
        # rowcount: -1 for an INSERT .. RETURNING on some drivers
        assert conn.execute(UNRECORDED_WRITES[table](rp)).rowcount != 0
    assert reported == [{table}]
    with cloud.writer_db.reader() as conn:
        kinds = conn.scalars(
            sa.select(tables.catalog_log.c.kind).where(
                tables.catalog_log.c.seq
                == sa.select(tables.catalog_changes.c.changes)
                .where(tables.catalog_changes.c.shard == tables.catalog_log.c.shard)
                .scalar_subquery()
            )
        ).all()
    assert changes.EVERYTHING in kinds
    cloud.answers(True)
    assert _full_reads() == full_reads + 1
    cloud.check()


def test_changes_of_one_write_share_its_number(db):
    """A write's changes are logged under one new number of one shard,
    as items 0.. in order, whatever their count (and counts that come
    back reuse their statement)."""
    for refs in ([7], [3, 1, 2], [5], [2, 9]):
        with db.reader() as conn:
            before = changes.counts(conn)
        with db.writer() as conn:
            changes.record(conn, changes.TRAIT, refs)
        with db.reader() as conn:
            after = changes.counts(conn)
            (shard,) = [s for s in after if after[s] != before.get(s, 0)]
            assert after[shard] == before.get(shard, 0) + 1
            logged = conn.execute(
                sa.select(
                    tables.catalog_log.c.item,
                    tables.catalog_log.c.kind,
                    tables.catalog_log.c.ref,
                )
                .where(
                    tables.catalog_log.c.shard == shard,
                    tables.catalog_log.c.seq == after[shard],
                )
                .order_by(tables.catalog_log.c.item)
            ).all()
        assert logged == [
            (item, changes.TRAIT, ref) for item, ref in enumerate(sorted(refs))
        ]


def test_a_limited_search_on_a_current_catalog_reads_one_statement(cloud, monkeypatch):
    """The catalog stamp comes with the first usage read: a limited search
    (a claim's GET) on a current catalog is one statement; when another
    worker changed the catalog meanwhile, that statement shows it and the
    answer is made again from the catalog brought up to date, errors
    included."""
    cloud.inventories(cloud.provider("one"), VCPU=8)
    cloud.check()
    monkeypatch.setattr(verify, "VERIFY_EVERY_S", 3600.0)
    path = "/allocation_candidates?resources=VCPU:1&limit=5"
    cloud.call(cloud.reader, path, status=200)  # compares once, now
    with rp_objects.statements(cloud.reader_db) as seen:
        before = cloud.call(cloud.reader, path, status=200).json()
    assert len(rp_objects._queries(seen)) == 1
    assert _count(before) == 1
    # Another worker's writes: the reader's catalog is behind.
    cloud.inventories(cloud.provider("two"), VCPU=8)
    cloud.call(cloud.writer, "/traits/CUSTOM_NEW", "PUT", status=201)
    with rp_objects.statements(cloud.reader_db) as seen:
        after = cloud.call(cloud.reader, path, status=200).json()
    assert len(rp_objects._queries(seen)) > 1
    assert _count(after) == 2
    assert refresh._CACHES[cloud.reader_db].catalog.stamp == _stamp(cloud.reader_db)
    # A trait the catalog did not know when the request began is known.
    cloud.call(cloud.writer, "/traits/CUSTOM_NEWER", "PUT", status=201)
    newer = cloud.call(cloud.reader, path + "&required=CUSTOM_NEWER", status=200)
    assert _count(newer.json()) == 0


def _held(cloud, monkeypatch):
    """(the reader's Cache, a candidate path) once the reader holds a
    catalog of one provider it needs not compare (not on SQLite, whose
    reads see their transaction's snapshot: skipped)."""
    if cloud.reader_db.dialect == "sqlite":
        pytest.skip("SQLite's reads see their transaction's snapshot")
    cloud.inventories(cloud.provider("one"), VCPU=8)
    cloud.check()
    monkeypatch.setattr(verify, "VERIFY_EVERY_S", 3600.0)
    path = "/allocation_candidates?resources=VCPU:1&limit=5"
    cloud.call(cloud.reader, path, status=200)  # compares once, now
    return refresh._CACHES[cloud.reader_db], path


def test_a_look_of_the_host_sent_after_a_search_began_confirms_it(cloud, monkeypatch):
    """A search answered from the held catalog is confirmed, with no
    statement, by a look another worker of the host sent after the search
    began that found the catalog's stamp and tokens (catalog/host_look.py);
    not by one sent before it began, nor one that found another stamp."""
    cache, path = _held(cloud, monkeypatch)
    stamp, tokens = cache.catalog.stamp, cache.catalog.token_sum

    def statements_of_a_search(seen_stamp, sent):
        cache.host_look.saw(seen_stamp, tokens, sent)
        with rp_objects.statements(cloud.reader_db) as seen:
            assert _count(cloud.call(cloud.reader, path, status=200).json()) == 1
        return len(rp_objects._queries(seen))

    # A clock ahead: sent after the search began.
    assert statements_of_a_search(stamp, time.monotonic() + 3600) == 0
    assert statements_of_a_search(stamp, time.monotonic() - 1) == 1
    # Another stamp: the search reads the stamp first (its own look).
    assert statements_of_a_search(stamp + 1, time.monotonic() + 3600) == 1


def test_a_look_of_the_host_sent_after_the_request_arrived_confirms_it(
    cloud, monkeypatch
):
    """Where the server's front tells when the request arrived (granian's
    thread, before the worker's loop got to it: ``placement.arrival``), a
    look of the host sent after that moment confirms the search, even one
    sent before the search began (the look of the request the loop served
    meanwhile); not one sent before the request arrived. Without the
    arrival known, the search's beginning is the moment, as before."""
    cache, path = _held(cloud, monkeypatch)
    stamp, tokens = cache.catalog.stamp, cache.catalog.token_sum

    def statements_of_a_search(arrived, sent):
        cache.host_look.saw(stamp, tokens, sent)
        with arrival.at(arrived), rp_objects.statements(cloud.reader_db) as seen:
            assert _count(cloud.call(cloud.reader, path, status=200).json()) == 1
        return len(rp_objects._queries(seen))

    now = time.monotonic()
    assert statements_of_a_search(now - 10, now - 5) == 0
    assert statements_of_a_search(now - 10, now - 20) == 1
    assert statements_of_a_search(None, now - 5) == 1


def test_a_claims_search_after_its_own_write_is_made_once(cloud, monkeypatch):
    """A worker's search after a write of its own committed since the
    host's last look (a claim's GET after its PUT) reads the stamp first
    rather than answer from the held catalog, find it behind and search
    again: one search, the same three statements (the look with the
    shards' counts, the log, the claimed allocations and usage), the
    claims' usage in the answer. A search with no write since searches
    once too (from the held catalog, confirmed by its look)."""
    if cloud.reader_db.dialect == "sqlite":
        pytest.skip("SQLite's reads see their transaction's snapshot")
    rp = cloud.provider("one")
    cloud.inventories(rp, VCPU=8)
    monkeypatch.setattr(verify, "VERIFY_EVERY_S", 3600.0)
    path = "/allocation_candidates?resources=VCPU:2&limit=5"
    cloud.call(cloud.writer, path, status=200)  # compares once, now
    searches = []
    search = answering._answer

    def counted(*args):
        searches.append(args)
        return search(*args)

    monkeypatch.setattr(answering, "_answer", counted)
    for claim in range(3):
        del searches[:]
        with rp_objects.statements(cloud.writer_db) as seen:
            found = cloud.call(cloud.writer, path, status=200).json()
        assert len(searches) == 1
        if claim:
            assert len(rp_objects._queries(seen)) == 3
        summary = found["provider_summaries"][rp]["resources"]["VCPU"]
        assert summary["used"] == 2 * claim
        cloud.write(
            "/allocations/%s" % uuid.uuid4(),
            body={
                "allocations": found["allocation_requests"][0]["allocations"],
                "consumer_generation": None,
                "project_id": str(uuid.uuid4()),
                "user_id": str(uuid.uuid4()),
                "consumer_type": "BENCH",
            },
        )
    del searches[:]
    cloud.call(cloud.writer, path, status=200)
    with rp_objects.statements(cloud.writer_db) as seen:
        found = cloud.call(cloud.writer, path, status=200).json()
    assert len(searches) == 2
    assert len(rp_objects._queries(seen)) == 1
    assert found["provider_summaries"][rp]["resources"]["VCPU"]["used"] == 6


def test_a_limited_search_reaches_the_trees_past_its_last_answer(cloud):
    """A limited page holds more trees than its limit, in case some give
    none; those the last answer did not reach, and a changed tree among
    those it did, are found when a later answer of the shape reaches
    them."""
    hosts = {name: cloud.provider(name) for name in "abcdefgh"}
    for rp in hosts.values():
        cloud.inventories(rp, VCPU=8)
    cloud.check()
    path = "/allocation_candidates?resources=VCPU:1&limit=%d"
    first = cloud.call(cloud.reader, path % 2, status=200).json()
    assert cloud.call(cloud.reader, path % 2, status=200).json() == first
    every = cloud.call(cloud.reader, path % 8, status=200).json()
    assert _count(every) == 8
    assert set(every["provider_summaries"]) == set(hosts.values())
    cloud.inventories(hosts["c"], VCPU=4)
    changed = cloud.call(cloud.reader, path % 8, status=200).json()
    assert _count(changed) == 8
    summary = changed["provider_summaries"][hosts["c"]]
    assert summary["resources"]["VCPU"]["capacity"] == 4


def test_a_search_that_found_the_catalog_behind_reads_the_stamp_first(
    fallback_cloud, monkeypatch
):
    """Under a stream of other workers' writes nearly every search from the
    held catalog would find it behind and search twice: after one does,
    searches read the stamp first (two statements) for
    UNCONFIRMED_PAUSE_S, then answer from the held catalog again (one).
    Without the triggers: with them usage is in memory, and either way the
    stamp is the one statement."""
    cloud = fallback_cloud
    cloud.inventories(cloud.provider("one"), VCPU=8)
    cloud.check()
    monkeypatch.setattr(verify, "VERIFY_EVERY_S", 3600.0)
    monkeypatch.setattr(refresh, "UNCONFIRMED_PAUSE_S", 3600.0)
    path = "/allocation_candidates?resources=VCPU:1&limit=5"
    cloud.call(cloud.reader, path, status=200)
    cloud.inventories(cloud.provider("two"), VCPU=8)  # another worker's
    behind = cloud.call(cloud.reader, path, status=200).json()
    assert _count(behind) == 2
    with rp_objects.statements(cloud.reader_db) as seen:
        paused = cloud.call(cloud.reader, path, status=200).json()
    assert len(rp_objects._queries(seen)) == 2
    assert _count(paused) == 2
    monkeypatch.setattr(refresh, "UNCONFIRMED_PAUSE_S", 0.0)
    with rp_objects.statements(cloud.reader_db) as seen:
        again = cloud.call(cloud.reader, path, status=200).json()
    assert len(rp_objects._queries(seen)) == 1
    assert _count(again) == 2
