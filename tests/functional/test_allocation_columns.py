"""catalog/consumers.py on SQLite, MySQL and PostgreSQL: allocations and
consumers read whole as columns, then advanced by re-reading the
consumers a step named, equal a fresh whole read after every step of
random SQL writes (rows added, moved between consumers, changed,
deleted; consumer records with and without rows; names; times NULL),
with the overlay folded into new columns now and then. (Providers'
generations are the catalog's usage's: test_usage_memory.py.)"""

import datetime
import random
import uuid

import pytest
import sqlalchemy as sa

from placement.db import tables
from placement.objects.catalog import consumer_columns
from placement.objects.catalog import consumers
from tests import fixtures

ALLOC, CONSUMERS, RP = tables.allocations, tables.consumers, tables.resource_providers
PROVIDERS = 6


@pytest.fixture(params=fixtures.BACKENDS)
def db(request):
    fixtures.require_backend(request.param)
    with fixtures.database(request.param) as db:
        with db.engine.begin() as conn:
            conn.execute(
                RP.insert(),
                [
                    {
                        "id": rp,
                        "uuid": str(uuid.uuid4()),
                        "name": "rp%d" % rp,
                        "generation": 0,
                        "root_provider_id": rp,
                    }
                    for rp in range(1, PROVIDERS + 1)
                ],
            )
            conn.execute(
                tables.projects.insert(),
                [{"id": 1, "external_id": "p1"}, {"id": 2, "external_id": "p2"}],
            )
            conn.execute(tables.users.insert(), [{"id": 1, "external_id": "u1"}])
            conn.execute(
                tables.consumer_types.insert(), [{"id": 1, "name": "INSTANCE"}]
            )
        yield db


class Writes:
    """Random writes by SQL; each returns the consumer uuids it touched."""

    def __init__(self, rnd):
        self.rnd = rnd
        self.uuids = [str(uuid.UUID(int=rnd.getrandbits(128))) for _ in range(12)]

    def step(self, conn):
        return self.rnd.choice(
            [
                self.claim,
                self.claim,
                self.move,
                self.change,
                self.delete,
                self.record,
                self.unrecord,
                self.times,
            ]
        )(conn)

    def _consumer(self):
        return self.rnd.choice(self.uuids)

    def _rp(self):
        return self.rnd.randint(1, PROVIDERS + 1)  # one past: no provider

    def claim(self, conn):
        consumer = self._consumer()
        rows = [
            {
                "consumer_id": consumer,
                "resource_provider_id": self._rp(),
                "resource_class_id": self.rnd.randint(0, 2),
                "used": self.rnd.randint(1, 2**31 - 1),
            }
            for _ in range(self.rnd.randint(1, 3))
        ]
        conn.execute(ALLOC.insert(), rows)
        return {consumer}

    def move(self, conn):
        ids = conn.scalars(sa.select(ALLOC.c.id)).all()
        if not ids:
            return set()
        row = self.rnd.choice(ids)
        was = conn.scalar(sa.select(ALLOC.c.consumer_id).where(ALLOC.c.id == row))
        now = self._consumer()
        conn.execute(ALLOC.update().where(ALLOC.c.id == row).values(consumer_id=now))
        return {was, now}

    def change(self, conn):
        consumer = self._consumer()
        conn.execute(
            ALLOC.update()
            .where(ALLOC.c.consumer_id == consumer)
            .values(used=ALLOC.c.used + 1, resource_provider_id=self._rp())
        )
        return {consumer}

    def delete(self, conn):
        consumer = self._consumer()
        conn.execute(ALLOC.delete().where(ALLOC.c.consumer_id == consumer))
        return {consumer}

    def record(self, conn):
        consumer = self._consumer()
        conn.execute(CONSUMERS.delete().where(CONSUMERS.c.uuid == consumer))
        conn.execute(
            CONSUMERS.insert(),
            {
                "uuid": consumer,
                "project_id": self.rnd.randint(1, 3),  # 3: no such project
                "user_id": 1,
                "generation": self.rnd.randint(0, 5),
                "consumer_type_id": self.rnd.choice([None, 1]),
            },
        )
        return {consumer}

    def unrecord(self, conn):
        consumer = self._consumer()
        conn.execute(CONSUMERS.delete().where(CONSUMERS.c.uuid == consumer))
        return {consumer}

    def times(self, conn):
        consumer = self._consumer()
        when = self.rnd.choice([None, datetime.datetime(2001, 2, 3, 4, 5, 6, 789000)])
        conn.execute(
            ALLOC.update()
            .where(ALLOC.c.consumer_id == consumer)
            .values(created_at=when, updated_at=self.rnd.choice([None, when]))
        )
        return {consumer}


@pytest.mark.parametrize(
    ("fold_at", "merge_at"), [(10_000, 256), (3, 256), (10_000, 2), (9, 2)]
)
def test_followed_equals_a_fresh_read(db, fold_at, merge_at, monkeypatch):
    monkeypatch.setattr(consumers, "FOLD_AT", fold_at)
    monkeypatch.setattr(consumers, "MERGE_AT", merge_at)
    writes = Writes(random.Random(44))
    with db.reader() as conn:
        followed = consumers.read(conn)
    for _ in range(60):
        with db.engine.begin() as conn:
            uuids = writes.step(conn)
        with db.reader() as conn:
            followed = followed.advanced(consumers.consumers_of(conn, uuids), uuids)
            fresh = consumers.read(conn)
        assert followed == fresh
        for consumer in writes.uuids:
            assert followed.consumer(consumer) == fresh.consumer(consumer)
        for rp in range(1, PROVIDERS + 2):
            assert followed.on_provider(rp) == fresh.on_provider(rp)


def _one_row_each(conn, uuids):
    """An allocation row of each consumer of ``uuids`` on provider 1."""
    conn.execute(
        ALLOC.insert(),
        [
            {
                "consumer_id": c,
                "resource_provider_id": 1,
                "resource_class_id": 0,
                "used": 1 + i,
            }
            for i, c in enumerate(uuids)
        ],
    )


def test_times_are_whole_seconds_of_updated_else_created(db):
    created = datetime.datetime(2001, 2, 3, 4, 5, 6, 999999)
    with db.engine.begin() as conn:
        _one_row_each(conn, ("a", "b", "c"))
        conn.execute(ALLOC.update().values(created_at=created, updated_at=None))
        conn.execute(
            ALLOC.update()
            .where(ALLOC.c.consumer_id == "b")
            .values(updated_at=created + datetime.timedelta(days=1))
        )
        conn.execute(
            ALLOC.update()
            .where(ALLOC.c.consumer_id == "c")
            .values(created_at=None, updated_at=None)
        )
    with db.reader() as conn:
        followed = consumers.read(conn)
    seconds = {c: followed.consumer(c).rows[0].modified for c in ("a", "b", "c")}
    assert consumer_columns.time_of(seconds["a"]) == created.replace(microsecond=0)
    assert seconds["b"] == seconds["a"] + 86400
    assert seconds["c"] is None


def test_records_match_as_the_database_compares_uuids(db):
    # The records are read apart from the rows and matched by uuid; one
    # whose uuid differs only in case matches where the database's
    # collation says so (MySQL's is case-insensitive), as the statement
    # that reads named consumers again (a join) finds it.
    recorded = str(uuid.UUID(int=7))
    rows = [recorded.upper(), recorded, "d" * 36, "short"]
    with db.engine.begin() as conn:
        _one_row_each(conn, rows)
        conn.execute(
            CONSUMERS.insert(),
            [
                {
                    "uuid": recorded,
                    "project_id": 2,
                    "user_id": 1,
                    "generation": 4,
                    "consumer_type_id": 1,
                },
                {
                    "uuid": "short",
                    "project_id": 1,
                    "user_id": 1,
                    "generation": 1,
                    "consumer_type_id": None,
                },
            ],
        )
    with db.reader() as conn:
        whole = consumers.read(conn)
        joined = consumers.consumers_of(conn, rows)
    for consumer in rows:
        assert whole.consumer(consumer) == joined.get(consumer)
    assert whole.consumer(recorded)[:4] == (4, "p2", "u1", "INSTANCE")
    assert whole.consumer("short")[:4] == (1, "p1", "u1", None)
    assert whole.consumer("d" * 36)[:4] == (None, None, None, None)
