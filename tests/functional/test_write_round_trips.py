"""The statements and round trips of the writes nova's resource tracker
makes when it registers a host (create the provider, then set its
inventories, traits and aggregates), on SQLite, MySQL and PostgreSQL.

Each write reads once (the provider, its rows of the kind written, locked
until commit), then only writes: on MySQL everything after that read is
sent with the COMMIT, one round trip, the catalog's change log included.
"""

import contextlib
import uuid

import pytest

from placement import exception
from placement.db import tables
from placement.objects import aggregate as agg_obj
from placement.objects import inventory as inv_obj
from placement.objects import resource_provider as rp_obj
from placement.objects import trait as trait_obj
from placement.objects.catalog import changes
from tests.functional.test_resource_provider_objects import _queries
from tests.helpers import statements

AGGREGATE = str(uuid.uuid4())
INVENTORY = {
    "VCPU": inv_obj.with_defaults({"total": 32}),
    "MEMORY_MB": inv_obj.with_defaults({"total": 8192}),
}


@pytest.fixture
def trips(db, monkeypatch):
    """The commands sent to MySQL meanwhile (statements, COMMIT); None on
    the other databases (their drivers send one statement at a time). The
    switches of multi-statement queries around a COMMIT sent with held
    statements are written with it and answered with it: not counted."""
    if db.dialect != "mysql":
        yield None
        return
    from pymysql import connections

    sent = []
    original = connections.Connection._execute_command

    def counted(conn, command, sql):
        sent.append(sql)
        return original(conn, command, sql)

    @contextlib.contextmanager
    def counting():
        sent.clear()
        monkeypatch.setattr(connections.Connection, "_execute_command", counted)
        try:
            yield sent
        finally:
            monkeypatch.setattr(connections.Connection, "_execute_command", original)

    yield counting


@contextlib.contextmanager
def watched(db, trips):
    """(SQL statements, round trips or None) of the block."""
    with statements(db) as seen:
        if trips is None:
            yield seen, None
        else:
            with trips() as sent:
                yield seen, sent


def _heads(seen):
    return [head.split(None, 1)[0] for head in _queries(seen)]


def _registered(db):
    """A root provider with inventory, traits and an aggregate, its
    generation 3; its uuid."""
    rp = str(uuid.uuid4())
    rp_obj.create(db, rp, rp)
    inv_obj.replace_inventories(db, rp, 0, INVENTORY)
    agg_obj.set_provider_aggregates(db, rp, [AGGREGATE], 1)
    trait_obj.set_provider_traits(db, rp, ["HW_CPU_X86_AVX2", "HW_CPU_X86_SSE2"], 2)
    return rp


# Whether a padded twin of the name is taken (MySQL's unique key does it);
# PostgreSQL first takes the name's advisory lock, so that twins created
# at once are checked one after the other.
_NAME_CHECK = {"mysql": [], "sqlite": ["SELECT"], "postgresql": ["SELECT", "SELECT"]}


def test_registering_a_host(db, trips):
    _registered(db)  # standard names and the aggregate are known now
    rp = str(uuid.uuid4())
    with watched(db, trips) as (seen, sent):
        rp_obj.create(db, rp, rp)
    # The row, (but on MySQL, whose unique key does it) whether a name
    # differing only by trailing spaces is taken, its root (itself), the
    # change count and log.
    assert _heads(seen) == ["INSERT", *_NAME_CHECK[db.dialect], "UPDATE"] + [
        "INSERT",
        "INSERT",
    ]
    assert sent is None or len(sent) == 2
    for write, heads in (
        (
            lambda: inv_obj.replace_inventories(db, rp, 0, INVENTORY),
            ["SELECT", "UPDATE", "INSERT", "INSERT", "INSERT"],
        ),
        (
            lambda: agg_obj.set_provider_aggregates(db, rp, [AGGREGATE], 1),
            ["SELECT", "UPDATE", "INSERT", "INSERT", "INSERT"],
        ),
        (
            lambda: trait_obj.set_provider_traits(db, rp, ["HW_CPU_X86_SSE2"], 2),
            ["SELECT", "UPDATE", "INSERT", "INSERT", "INSERT"],
        ),
    ):
        with watched(db, trips) as (seen, sent):
            write()
        assert _heads(seen) == heads
        assert sent is None or len(sent) == 2
    assert trait_obj.get_provider_traits(db, rp)[0] == 3
    assert agg_obj.get_provider_aggregates(db, rp) == (3, [AGGREGATE])


def test_a_child_reads_its_parent_first(db, trips):
    parent = _registered(db)
    child = str(uuid.uuid4())
    with watched(db, trips) as (seen, sent):
        rp_obj.create(db, child, child, parent)
    assert _heads(seen) == ["SELECT", "INSERT", *_NAME_CHECK[db.dialect]] + [
        "INSERT",
        "INSERT",
    ]
    assert sent is None or len(sent) == 3
    assert rp_obj.get(db, child)["root_provider_uuid"] == parent


def test_a_failed_write_held_for_commit_writes_nothing(db, monkeypatch):
    """A statement sent with the COMMIT that fails (here: a trait deleted
    since it was read) fails the whole write, the generation move and the
    change log with it; the write runs again, and finds the trait gone."""
    if db.dialect == "sqlite":
        pytest.skip("a SQLite writer holds the database: no one deletes meanwhile")
    rp = _registered(db)
    trait_obj.ensure_trait(db, "CUSTOM_GONE")
    original = trait_obj.common.trait_rows
    stamps = []

    def read_then_deleted(conn, names):
        rows = original(conn, names)
        with db.engine.connect() as other:
            # Not through the API: it would wait for the provider's lock.
            other.execute(
                tables.traits.delete().where(tables.traits.c.name == "CUSTOM_GONE")
            )
            other.commit()
            # The deletion is counted (the triggers): the failed write not.
            stamps.append(changes.stamp(other))
        return rows

    monkeypatch.setattr(trait_obj.common, "trait_rows", read_then_deleted)
    with pytest.raises(exception.TraitNotFound):
        trait_obj.set_provider_traits(db, rp, ["CUSTOM_GONE"], 3)
    monkeypatch.undo()
    assert trait_obj.get_provider_traits(db, rp)[0] == 3
    with db.reader() as conn:
        assert changes.stamp(conn) == stamps[0]


def test_removing_a_class_reads_its_allocations_first(db, trips):
    rp = _registered(db)
    smaller = {"VCPU": inv_obj.with_defaults({"total": 16})}
    with watched(db, trips) as (seen, sent):
        assert inv_obj.replace_inventories(db, rp, 3, smaller) == 4
    # The provider with its classes, the removed class's allocations, then
    # only writes: the move, the removal, the update, the change log.
    assert _heads(seen) == [
        "SELECT",
        "SELECT",
        "UPDATE",
        "DELETE",
        "UPDATE",
        "INSERT",
        "INSERT",
    ]
    assert sent is None or len(sent) == 3
    rows = inv_obj.get_inventories(db, rp)[1]
    assert [(row["resource_class"], row["total"]) for row in rows] == [("VCPU", 16)]


def test_nothing_is_asked_after_a_held_statement(db):
    """A statement whose answer is needed, after one held for the COMMIT,
    would run before it on MySQL: it is refused, and nothing is written."""
    if db.dialect != "mysql":
        pytest.skip("only MySQL holds statements back")
    rp = _registered(db)
    with pytest.raises(RuntimeError, match="held back"):
        with db.writer() as conn:
            provider = rp_obj.common.get_provider(conn, rp)
            rp_obj.common.bump_held(conn, provider)
            rp_obj.common.get_provider(conn, rp)
    assert rp_obj.get(db, rp)["generation"] == 3
