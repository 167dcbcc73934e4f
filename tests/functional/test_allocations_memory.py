"""Allocations answered from the catalog (doc/architecture.md
"Allocations in memory"), where the triggers log every writer's: on
SQLite, MySQL and PostgreSQL, two workers on one database, one writing
(through the API, and by SQL by hand) and one reading. After every step
of a seeded random run of claims, moves between consumers, deletes,
consumer generation conflicts and hand-written rows, the reading worker's
catalog holds the allocations a fresh read finds, and its answers to
``GET /allocations/{c}`` and ``GET /resource_providers/{uuid}/allocations``
at every microversion are byte for byte the SQL path's (the catalog
off). So are ``GET /resource_providers/{uuid}``'s, which take the
provider's generation and last change from the same columns, and its
inventories' and traits' with their Last-Modified (the rows' times,
written by hand too)."""

import datetime
import random
import uuid

import pytest
import sqlalchemy as sa

from placement.db import tables
from placement.db import triggers
from placement.objects import allocation_reads
from placement.objects import resource_provider as rp_obj
from placement.objects.catalog import consumers
from placement.objects.catalog import refresh
from placement.objects.catalog import store
from tests import fixtures
from tests import wsgi_client
from tests.functional import test_candidate_catalog as candidate_catalog

VERSIONS = ("1.0", "1.12", "1.15", "1.28", "1.38", "1.39")
ALLOC, CONSUMERS, RP = tables.allocations, tables.consumers, tables.resource_providers
INV, T, RPT = tables.inventories, tables.traits, tables.resource_provider_traits
# Traits a step by hand gives or takes (standard ones: they exist).
TRAITS = ("HW_CPU_X86_AVX2", "HW_CPU_X86_SSE42")


@pytest.fixture(params=fixtures.BACKENDS)
def cloud(request):
    fixtures.require_backend(request.param)
    with (
        fixtures.database_url(request.param) as url,
        candidate_catalog.two_workers(url, url) as cloud,
    ):
        yield cloud


def _providers(cloud, count=3):
    providers = []
    for i in range(count):
        rp = cloud.provider("host%d" % i)
        cloud.inventories(rp, VCPU=64, MEMORY_MB=65536, DISK_GB=1000)
        providers.append(rp)
    return providers


def _get(cloud, path, version, catalog_on):
    with fixtures.overrides(**{"placement.provider_catalog": catalog_on}):
        return wsgi_client.call(
            cloud.reader,
            path,
            x_auth_token="admin",
            openstack_api_version="placement %s" % version,
        )


def _answers_agree(cloud, paths):
    """Each path's answer from memory is the SQL path's, at every
    microversion."""
    for path in paths:
        for version in VERSIONS:
            mine = _get(cloud, path, version, True)
            sql = _get(cloud, path, version, False)
            assert (mine.status, _body(mine)) == (sql.status, _body(sql)), (
                path,
                version,
            )
            body = mine.json() if mine.status == 200 else {}
            if body and body.get("allocations", True) and body.get("traits", True):
                # (Allocations or traits without rows both say "now"; a
                # provider always has a time, inventories without rows
                # none.)
                assert mine.headers.get("last-modified") == sql.headers.get(
                    "last-modified"
                )


def _body(resp):
    """The body's bytes; an error's less its request id."""
    if resp.status < 400:
        return resp.body
    errors = resp.json()["errors"]
    return [{k: v for k, v in e.items() if k != "request_id"} for e in errors]


def _held_is_fresh(cloud):
    """The reading worker's catalog follows allocations and holds what a
    fresh read finds."""
    catalog = refresh._CACHES[cloud.reader_db].catalog
    assert catalog.allocations is not None
    with cloud.reader_db.reader() as conn:
        assert catalog.stamp == candidate_catalog._stamp(cloud.reader_db)
        assert catalog.allocations == consumers.read(conn)
        # The providers' and inventories' times and the traits' too.
        afresh = store.Catalog.read(conn, followed=True)
    assert candidate_catalog._usage(catalog.used) == candidate_catalog._usage(
        afresh.used
    )
    assert catalog.trait_seconds == afresh.trait_seconds


class Steps:
    """Random writes through the writing worker and by hand."""

    def __init__(self, cloud, providers, rnd):
        self.cloud, self.providers, self.rnd = cloud, providers, rnd
        self.consumers = [str(uuid.UUID(int=rnd.getrandbits(128))) for _ in range(8)]

    def run(self):
        step = self.rnd.choice(
            [
                self.claim,
                self.claim,
                self.move,
                self.delete,
                self.conflict,
                self.by_hand_row,
                self.by_hand_record,
                self.by_hand_generation,
                self.by_hand_times,
            ]
        )
        step()

    def _consumer_generation(self, consumer):
        resp = self.cloud.call(
            self.cloud.writer, "/allocations/%s" % consumer, status=200
        )
        return resp.json().get("consumer_generation")

    def _resources(self):
        return {
            "VCPU": self.rnd.randint(1, 4),
            "MEMORY_MB": self.rnd.choice([512, 1024]),
        }

    def claim(self):
        consumer = self.rnd.choice(self.consumers)
        self.cloud.call(
            self.cloud.writer,
            "/allocations/%s" % consumer,
            "PUT",
            {
                "allocations": {
                    rp: {"resources": self._resources()}
                    for rp in self.rnd.sample(self.providers, self.rnd.randint(1, 2))
                },
                "project_id": self.rnd.choice(["p1", "p2"]),
                "user_id": "u1",
                "consumer_generation": self._consumer_generation(consumer),
                "consumer_type": self.rnd.choice(["INSTANCE", "MIGRATION"]),
            },
            status=204,
        )

    def move(self):
        source, target = self.rnd.sample(self.consumers, 2)
        held = self.cloud.call(
            self.cloud.writer, "/allocations/%s" % source, status=200
        ).json()
        if not held["allocations"] or held.get("project_id") is None:
            # (Nothing to move, or rows without a record, written by
            # hand: the API moves only what names its owner.)
            return
        body = {
            source: {
                "allocations": {},
                "project_id": held["project_id"],
                "user_id": held["user_id"],
                "consumer_generation": held["consumer_generation"],
                "consumer_type": held["consumer_type"],
            },
            target: {
                "allocations": {
                    rp: {"resources": entry["resources"]}
                    for rp, entry in held["allocations"].items()
                },
                "project_id": held["project_id"],
                "user_id": held["user_id"],
                "consumer_generation": self._consumer_generation(target),
                "consumer_type": held["consumer_type"],
            },
        }
        self.cloud.call(self.cloud.writer, "/allocations", "POST", body, status=204)

    def delete(self):
        consumer = self.rnd.choice(self.consumers)
        resp = self.cloud.call(
            self.cloud.writer, "/allocations/%s" % consumer, "DELETE"
        )
        assert resp.status in (204, 404)

    def conflict(self):
        consumer = self.rnd.choice(self.consumers)
        generation = self._consumer_generation(consumer)
        self.cloud.call(
            self.cloud.writer,
            "/allocations/%s" % consumer,
            "PUT",
            {
                "allocations": {self.providers[0]: {"resources": self._resources()}},
                "project_id": "p1",
                "user_id": "u1",
                "consumer_generation": 99 if generation is None else generation + 5,
                "consumer_type": "INSTANCE",
            },
            status=409,
        )

    def _by_hand(self, *statements):
        with self.cloud.writer_db.engine.begin() as conn:
            for statement in statements:
                conn.execute(statement)

    def _rp_id(self):
        with self.cloud.writer_db.engine.connect() as conn:
            return conn.scalar(
                sa.select(RP.c.id).where(RP.c.uuid == self.rnd.choice(self.providers))
            )

    def by_hand_row(self):
        consumer = self.rnd.choice(self.consumers)
        self._by_hand(
            self.rnd.choice(
                [
                    ALLOC.insert().values(
                        consumer_id=consumer,
                        resource_provider_id=self._rp_id(),
                        resource_class_id=2,  # DISK_GB
                        used=self.rnd.randint(1, 10),
                    ),
                    ALLOC.update()
                    .where(ALLOC.c.consumer_id == consumer)
                    .values(used=ALLOC.c.used + 1),
                    ALLOC.delete().where(ALLOC.c.consumer_id == consumer),
                ]
            )
        )

    def by_hand_record(self):
        consumer = self.rnd.choice(self.consumers)
        self._by_hand(
            self.rnd.choice(
                [
                    CONSUMERS.update()
                    .where(CONSUMERS.c.uuid == consumer)
                    .values(generation=CONSUMERS.c.generation + 1),
                    CONSUMERS.delete().where(CONSUMERS.c.uuid == consumer),
                ]
            )
        )

    def by_hand_generation(self):
        self._by_hand(
            RP.update()
            .where(RP.c.id == self._rp_id())
            .values(generation=RP.c.generation + 1)
        )

    def _time(self):
        """A time no write of this run makes (Last-Modified's seconds)."""
        return datetime.datetime(2031, 1, 1) + datetime.timedelta(
            seconds=self.rnd.randint(0, 10**6)
        )

    def _trait_id(self):
        with self.cloud.writer_db.engine.connect() as conn:
            return conn.scalar(
                sa.select(T.c.id).where(T.c.name == self.rnd.choice(TRAITS))
            )

    def by_hand_times(self):
        """An inventory's or a trait's time, a trait given or taken."""
        rp, trait = self._rp_id(), self._trait_id()
        self._by_hand(
            *self.rnd.choice(
                [
                    [
                        INV.update()
                        .where(
                            INV.c.resource_provider_id == rp,
                            INV.c.resource_class_id == self.rnd.randint(0, 2),
                        )
                        .values(updated_at=self._time())
                    ],
                    [T.update().where(T.c.id == trait).values(updated_at=self._time())],
                    [
                        RPT.delete().where(
                            RPT.c.resource_provider_id == rp, RPT.c.trait_id == trait
                        ),
                        RPT.insert().values(resource_provider_id=rp, trait_id=trait),
                    ],
                    [RPT.delete().where(RPT.c.resource_provider_id == rp)],
                ]
            )
        )


@pytest.fixture
def from_memory(monkeypatch):
    """The answers given from memory, counted by read."""
    counted = {"consumer": 0, "provider": 0, "rp": 0}
    for name, module, function in (
        ("consumer", allocation_reads, "_consumer_in"),
        ("provider", allocation_reads, "_provider_in"),
        ("rp", rp_obj, "held"),
    ):
        answer = getattr(module, function)

        def spy(*args, name=name, answer=answer):
            counted[name] += 1
            return answer(*args)

        monkeypatch.setattr(module, function, spy)
    return counted


def test_random_writes_are_followed(cloud, from_memory):
    providers = _providers(cloud)
    steps = Steps(cloud, providers, random.Random(4444))
    paths = (
        ["/allocations/%s" % c for c in steps.consumers]
        + ["/resource_providers/%s/allocations" % rp for rp in providers]
        + ["/resource_providers/%s" % rp for rp in providers]
        + ["/resource_providers/%s/inventories" % rp for rp in providers]
        + ["/resource_providers/%s/traits" % rp for rp in providers]
    )
    _answers_agree(cloud, paths)
    for _ in range(40):
        steps.run()
        _answers_agree(cloud, paths)
        _held_is_fresh(cloud)
    # Every answer with the catalog on came from memory (the writing
    # worker's reads of consumers and providers too).
    assert from_memory["consumer"] >= 41 * len(steps.consumers) * len(VERSIONS)
    assert from_memory["provider"] == 41 * len(providers) * len(VERSIONS)
    # Traits from 1.6: 5 of the 6 microversions.
    assert from_memory["rp"] >= 41 * len(providers) * (3 * len(VERSIONS) - 1)


def test_unknown_provider_and_consumer(cloud):
    _providers(cloud, 1)
    _answers_agree(
        cloud,
        [
            "/allocations/%s" % uuid.uuid4(),
            "/resource_providers/%s/allocations" % uuid.uuid4(),
            "/resource_providers/%s" % uuid.uuid4(),
        ],
    )
    _held_is_fresh(cloud)


def test_writes_while_the_triggers_were_gone_are_never_missed(cloud):
    """Allocations followed while the triggers were dropped miss writes:
    once a look found them gone, memory answers no allocation read until
    a whole read, even after they are back."""
    providers = _providers(cloud, 2)
    steps = Steps(cloud, providers, random.Random(7))
    steps.claim()
    paths = (
        ["/allocations/%s" % c for c in steps.consumers]
        + ["/resource_providers/%s/allocations" % rp for rp in providers]
        + ["/resource_providers/%s" % rp for rp in providers]
    )
    _answers_agree(cloud, paths)
    cache = refresh._CACHES[cloud.reader_db]
    with cloud.writer_db.engine.begin() as conn:
        triggers.drop(conn)
    assert not cache.look_for_triggers(cloud.reader_db)
    steps.by_hand_row()
    steps.claim()
    with cloud.writer_db.engine.begin() as conn:
        triggers.create(conn)
    assert cache.look_for_triggers(cloud.reader_db)
    _answers_agree(cloud, paths)
    with cloud.reader_db.reader() as conn:
        assert refresh.with_allocations(cloud.reader_db, conn) is None


def test_statements_of_many_rows_by_hand_are_followed(cloud):
    """Statements by hand each writing several rows (PostgreSQL's triggers
    log them once per statement, db/triggers.py): an INSERT of several
    consumers and of several allocations, UPDATEs over several
    inventories, allocations and providers, DELETEs of several rows.
    After each the reading worker's catalog, following the log (never
    read whole), is what a fresh read gives; each row took one number."""
    providers = _providers(cloud)
    steps = Steps(cloud, providers, random.Random(44))
    steps.claim()
    hand = [str(uuid.uuid4()), str(uuid.uuid4())]
    paths = ["/allocations/%s" % c for c in steps.consumers + hand] + [
        "/resource_providers/%s/allocations" % rp for rp in providers
    ]
    cloud.check()
    with cloud.writer_db.engine.connect() as conn:
        ids = conn.scalars(sa.select(RP.c.id).order_by(RP.c.id)).all()
        project, user = conn.execute(
            sa.select(CONSUMERS.c.project_id, CONSUMERS.c.user_id).limit(1)
        ).one()
    inv = tables.inventories
    # Each statement and the rows it writes.
    for statement, rows in [
        (
            CONSUMERS.insert().values(
                [
                    {"uuid": c, "project_id": project, "user_id": user, "generation": 0}
                    for c in hand
                ]
            ),
            2,
        ),
        (
            ALLOC.insert().values(
                [
                    {
                        "consumer_id": c,
                        "resource_provider_id": rp,
                        "resource_class_id": rc,
                        "used": 2,
                    }
                    for c in hand
                    for rp in ids
                    for rc in (0, 1)  # VCPU, MEMORY_MB
                ]
            ),
            12,
        ),
        (
            inv.update()
            .where(inv.c.resource_class_id == 0)
            .values(total=inv.c.total + 8),
            3,
        ),
        (
            ALLOC.update()
            .where(ALLOC.c.consumer_id.in_(hand))
            .values(used=ALLOC.c.used + 1),
            12,
        ),
        (RP.update().values(generation=RP.c.generation + 1), 3),
        (RP.update().where(RP.c.id != ids[0]).values(name=RP.c.name + "-renamed"), 2),
        (inv.delete().where(inv.c.resource_class_id == 2), 3),  # DISK_GB
        (
            ALLOC.delete().where(
                ALLOC.c.consumer_id == hand[0], ALLOC.c.resource_provider_id != ids[0]
            ),
            4,
        ),
        (CONSUMERS.delete().where(CONSUMERS.c.uuid.in_(hand)), 2),
    ]:
        before = candidate_catalog._stamp(cloud.writer_db)
        with cloud.writer_db.engine.begin() as conn:
            conn.execute(statement)
        assert candidate_catalog._stamp(cloud.writer_db) == before + rows, statement
        cloud.check()
        _answers_agree(cloud, paths)
        _held_is_fresh(cloud)
