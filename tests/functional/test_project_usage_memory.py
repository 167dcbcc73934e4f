"""GET /usages answered from the catalog (issue 44), where the triggers
log every writer's allocations and consumers: on SQLite, MySQL and
PostgreSQL, two workers on one database, one writing (through the API,
and by SQL by hand, records included) and one reading. After every step
of a seeded random run, the reading worker's answers for every project,
user and consumer type, at every microversion, are the SQL path's (the
catalog off), with the overlay of changed consumers folded into new
columns often or never; a usage written by SQL by hand is seen."""

import random
import uuid

import pytest
import sqlalchemy as sa

from placement.db import tables
from placement.objects.catalog import consumers
from placement.objects.catalog import project_usage
from tests import helpers
from tests.functional import test_allocations_memory as allocations_memory

ALLOC, CONSUMERS = tables.allocations, tables.consumers
PROJECTS, USERS, TYPES = tables.projects, tables.users, tables.consumer_types
cloud = allocations_memory.cloud
_get = allocations_memory._get

QUERIES = [
    "project_id=%s%s%s" % (project, user, kind)
    for project in ("p1", "p2", "p3", "P1")
    for user in ("", "&user_id=u1", "&user_id=u2")
    for kind in (
        "",
        "&consumer_type=all",
        "&consumer_type=unknown",
        "&consumer_type=INSTANCE",
        "&consumer_type=MIGRATION",
    )
]


def _answers_agree(cloud):
    for query in QUERIES:
        for version in ("1.9", "1.37", "1.38", "1.39"):
            if "consumer_type" in query and version in ("1.9", "1.37"):
                continue
            path = "/usages?" + query
            mine = _get(cloud, path, version, True)
            sql = _get(cloud, path, version, False)
            assert mine.status == sql.status == 200, (path, version, mine.body)
            assert mine.json() == sql.json(), (path, version)


class Steps(allocations_memory.Steps):
    """The allocation tests' writes, and consumers' records moved to
    another project, user or type by hand."""

    def run(self):
        if self.rnd.random() < 0.25:
            self.by_hand_owner()
        else:
            super().run()

    def by_hand_owner(self):
        consumer = self.rnd.choice(self.consumers)
        with self.cloud.writer_db.engine.begin() as conn:
            field, table = self.rnd.choice(
                [
                    ("project_id", PROJECTS),
                    ("user_id", USERS),
                    ("consumer_type_id", TYPES),
                ]
            )
            ids = conn.execute(sa.select(table.c.id)).scalars().all()
            if not ids:
                return  # (no claim yet)
            # (Not to no type: the API's moves would refuse "unknown".)
            conn.execute(
                CONSUMERS.update()
                .where(CONSUMERS.c.uuid == consumer)
                .values({field: self.rnd.choice(ids)})
            )


@pytest.fixture
def from_memory(monkeypatch):
    """The answers given from memory, counted."""
    counted = []
    answer = project_usage.by_type

    def spy(*args):
        counted.append(args[1])
        return answer(*args)

    monkeypatch.setattr(project_usage, "by_type", spy)
    return counted


@pytest.mark.parametrize(
    ("fold_at", "merge_at"),
    (
        (3, consumers.MERGE_AT),
        (consumers.FOLD_AT, consumers.MERGE_AT),
        (consumers.FOLD_AT, 2),
    ),
)
def test_random_writes_are_followed(cloud, from_memory, monkeypatch, fold_at, merge_at):
    monkeypatch.setattr(consumers, "FOLD_AT", fold_at)
    monkeypatch.setattr(consumers, "MERGE_AT", merge_at)
    providers = allocations_memory._providers(cloud)
    steps = Steps(cloud, providers, random.Random(4545))
    _answers_agree(cloud)
    for _ in range(30):
        steps.run()
        _answers_agree(cloud)
    # Every answer with the catalog on came from memory.
    # (12 queries without a type at 4 versions, 48 with one at 2.)
    assert len(from_memory) == 31 * (12 * 4 + 48 * 2)


def test_usage_written_by_hand_is_seen(cloud, from_memory):
    (rp,) = allocations_memory._providers(cloud, 1)
    consumer = str(uuid.uuid4())
    claim = helpers.claim(rp, {"VCPU": 2}, "hand", "u1")
    cloud.call(cloud.writer, "/allocations/%s" % consumer, "PUT", claim, status=204)
    path = "/usages?project_id=hand"
    assert _get(cloud, path, "1.9", True).json()["usages"] == {"VCPU": 2}
    with cloud.writer_db.engine.begin() as conn:
        conn.execute(
            ALLOC.update().where(ALLOC.c.consumer_id == consumer).values(used=9)
        )
    assert _get(cloud, path, "1.9", True).json()["usages"] == {"VCPU": 9}
    # Another consumer of the project, record and row, written by hand.
    other = str(uuid.uuid4())
    with cloud.writer_db.engine.begin() as conn:
        project, user = (
            conn.scalar(sa.select(table.c.id).where(table.c.external_id == name))
            for table, name in ((PROJECTS, "hand"), (USERS, "u1"))
        )
        conn.execute(
            CONSUMERS.insert().values(
                uuid=other, project_id=project, user_id=user, generation=0
            )
        )
        conn.execute(
            ALLOC.insert().values(
                consumer_id=other,
                resource_provider_id=conn.scalar(
                    sa.select(tables.resource_providers.c.id)
                ),
                resource_class_id=2,  # DISK_GB
                used=5,
            )
        )
    by_type = _get(cloud, path, "1.38", True).json()["usages"]
    assert by_type == {
        "INSTANCE": {"consumer_count": 1, "VCPU": 9},
        "unknown": {"consumer_count": 1, "DISK_GB": 5},
    }
    assert _get(cloud, path, "1.38", False).json()["usages"] == by_type
    assert from_memory == ["hand"] * 3
