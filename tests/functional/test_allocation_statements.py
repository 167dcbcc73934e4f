"""The round trips of an allocation write, on SQLite, MySQL and
PostgreSQL: a claim (PUT /allocations of a new consumer, as nova's
scheduler makes one per instance) reads the consumers and the providers'
generations, inventories and usage in one statement, then swaps the
generations and writes (on MySQL the writes go with the COMMIT; on MariaDB
the swap too, checked there: two round trips); a write that empties a
consumer reads the state of the providers it held as well, and moves their
generations."""

import dataclasses

import pytest
import sqlalchemy as sa

from placement import exception
from placement.objects import allocation as alloc_obj
from placement.objects import allocation_reads
from placement.objects import usage as usage_obj
from placement.objects.catalog import refresh
from tests.functional.test_allocation_retry import _claim
from tests.functional.test_allocation_retry import _new_provider
from tests.functional.test_allocation_retry import db  # noqa: F401
from tests.functional.test_resource_provider_objects import _queries
from tests.functional.test_write_round_trips import trips  # noqa: F401
from tests.functional.test_write_round_trips import watched
from tests.helpers import statements


def _write(rp_uuid, consumer_uuid=None, amount=2, generation=None):
    return dataclasses.replace(
        _claim(rp_uuid, consumer_uuid, generation),
        allocations={rp_uuid: {"VCPU": amount}} if amount else {},
    )


def _heads(seen):
    """The first word of each statement (SELECT, INSERT, ...)."""
    return [head.split(None, 1)[0] for head in _queries(seen)]


def _generation(database, rp_uuid):
    with database.reader() as conn:
        return alloc_obj.common.get_provider(conn, rp_uuid)["generation"]


def test_a_claim_reads_once_before_it_swaps(db, trips):  # noqa: F811
    rp = _new_provider(db)
    # The first claim learns the project's and user's ids (on MySQL only
    # that they exist: no id is read, the new consumer takes them by name).
    alloc_obj.replace_allocations(db, [_write(rp)], check_generation=True)
    claim = _write(rp, amount=3)
    before = _generation(db, rp)
    with watched(db, trips) as (seen, sent):
        alloc_obj.replace_allocations(db, [claim], check_generation=True)
    assert _heads(seen) == ["SELECT", "UPDATE", "INSERT", "INSERT"]
    # The read, then the rest with the COMMIT: on MariaDB the swap too,
    # checked there; on PostgreSQL the swap's count is read first.
    mariadb = getattr(db.engine.dialect, "is_mariadb", False)
    assert sent is None or len(sent) == (2 if mariadb else 3)
    if mariadb:
        assert sent[-1].startswith("BEGIN NOT ATOMIC")
        assert sent[-1].endswith("COMMIT")
    assert _generation(db, rp) == before + 1
    found = allocation_reads.for_consumer(db, claim.uuid)
    assert found.allocations[rp]["resources"] == {"VCPU": 3}
    assert found.generation == 1


def test_a_claim_over_capacity_is_refused_from_the_first_read(db):  # noqa: F811
    rp = _new_provider(db)  # 8 VCPU
    first = _write(rp, amount=6)
    alloc_obj.replace_allocations(db, [first], check_generation=True)
    with pytest.raises(alloc_obj.exception.Conflict, match="exceed the capacity"):
        alloc_obj.replace_allocations(db, [_write(rp, amount=3)], check_generation=True)
    # The consumer's own allocations do not count against it: 6 -> 8 fits.
    grown = _write(rp, first.uuid, amount=8, generation=1)
    alloc_obj.replace_allocations(db, [grown], check_generation=True)
    assert usage_obj.provider_usages(db, rp)[1] == {"VCPU": 8}


def test_emptying_a_consumer_reads_and_moves_the_providers_it_held(db):  # noqa: F811
    held, other = _new_provider(db), _new_provider(db)
    leaving = _write(held, amount=4)
    alloc_obj.replace_allocations(db, [leaving], check_generation=True)
    before = _generation(db, held), _generation(db, other)
    with statements(db) as seen:
        alloc_obj.replace_allocations(
            db,
            [
                _write(held, leaving.uuid, amount=0, generation=1),
                _write(other, amount=8),
            ],
            check_generation=True,
        )
    # The first read names ``other`` only: the state of ``held`` is read
    # again with it before the swap.
    assert _heads(seen)[:3] == ["SELECT", "SELECT", "UPDATE"]
    assert (_generation(db, held), _generation(db, other)) == (
        before[0] + 1,
        before[1] + 1,
    )
    assert allocation_reads.for_consumer(db, leaving.uuid).allocations == {}


def test_a_consumer_created_meanwhile_fails_the_claim_whole(db, monkeypatch):  # noqa: F811
    """Another writer creates the consumer between the claim's read and
    its commit: the claim writes nothing (on MySQL its consumer INSERT
    fails with the COMMIT, after its swap), runs again, and is refused as
    a consumer generation conflict, as when it reads the consumer."""
    if db.dialect == "sqlite":
        pytest.skip("a SQLite writer holds the database: no one writes meanwhile")
    rp, elsewhere = _new_provider(db), _new_provider(db)
    claim = _write(rp, amount=3)
    original = alloc_obj._existing_with_state
    reads = []

    def read_then_created(conn, *args):
        found = original(conn, *args)
        reads.append(found)
        if len(reads) == 1:  # another connection, committed
            rival = _write(elsewhere, claim.uuid, amount=5)
            alloc_obj.replace_allocations(db, [rival], check_generation=True)
        return found

    monkeypatch.setattr(alloc_obj, "_existing_with_state", read_then_created)
    before = _generation(db, rp)
    with pytest.raises(
        exception.ConcurrentUpdate,
        match="consumer generation conflict - expected 1 but got None",
    ):
        alloc_obj.replace_allocations(db, [claim], check_generation=True)
    # The claim's, the rival's, the claim's again after its failed commit.
    assert len(reads) == 3
    assert _generation(db, rp) == before
    assert allocation_reads.for_provider(db, rp).allocations == {}
    found = allocation_reads.for_consumer(db, claim.uuid)
    assert found.allocations[elsewhere]["resources"] == {"VCPU": 5}
    assert list(found.allocations) == [elsewhere]
    assert found.generation == 1


def _plans(database, seen):
    """MariaDB's (MySQL's) plan of each SELECT in ``seen`` ((statement,
    parameters)) naming the allocations: the rows of its EXPLAIN."""
    plans = []
    with database.engine.connect() as conn:
        cursor = conn.connection.dbapi_connection.cursor()
        for statement, parameters in seen:
            if statement.lstrip().startswith("SELECT") and "allocations" in statement:
                cursor.execute("EXPLAIN " + statement, parameters)
                plans.append(cursor.fetchall())
    return plans


def test_a_claim_and_its_catch_up_read_without_temporary_tables(db):  # noqa: F811
    """The claim's read (consumers, providers' state and usage) and the
    catalog's catch-up after it (the consumer's allocations with the
    provider's usage) are planned on the indexes alone: no temporary
    table (a DISTINCT, a grouped derived table, an ORDER BY over a UNION
    made MariaDB build one per claim, and sort in it)."""
    if db.dialect != "mysql":
        pytest.skip("MariaDB's and MySQL's plans")
    rp = _new_provider(db)
    alloc_obj.replace_allocations(db, [_write(rp)], check_generation=True)
    refresh.warm(db)
    seen = []

    def record(conn, cursor, statement, parameters, *args):
        seen.append((statement, parameters))

    sa.event.listen(db.engine, "before_cursor_execute", record)
    try:
        alloc_obj.replace_allocations(db, [_write(rp, amount=3)], check_generation=True)
        with db.several_reads() as conn:
            assert refresh.current(db, conn) is not None
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", record)
    plans = _plans(db, seen)
    assert len(plans) == 2, seen  # the claim's read, the catch-up's
    for plan in plans:
        for row in plan:
            assert not str(row[2]).startswith(("<derived", "<union")), plan
            assert "temporary" not in str(row[-1]), plan


def _rival_after_first_read(database, monkeypatch, rival):
    """Commit ``rival`` (a write) on another connection just after the
    claim's first read; returns the list of reads made."""
    original = alloc_obj._existing_with_state
    reads = []

    def read_then_rival(conn, *args):
        found = original(conn, *args)
        reads.append(found)
        if len(reads) == 1:
            alloc_obj.replace_allocations(database, [rival], check_generation=True)
        return found

    monkeypatch.setattr(alloc_obj, "_existing_with_state", read_then_rival)
    return reads


def test_a_claim_whose_swap_lost_at_commit_reads_again(db, monkeypatch):  # noqa: F811
    """Another writer claims on the same provider between the claim's read
    and its COMMIT: the claim's swap (on MariaDB sent with the COMMIT)
    loses, nothing of it is written then; it reads again and is written
    once, the generation moved by each write."""
    if db.dialect == "sqlite":
        pytest.skip("a SQLite writer holds the database: no one writes meanwhile")
    rp = _new_provider(db)  # 8 VCPU
    before = _generation(db, rp)
    claim, rival = _write(rp, amount=3), _write(rp, amount=4)
    reads = _rival_after_first_read(db, monkeypatch, rival)
    alloc_obj.replace_allocations(db, [claim], check_generation=True)
    # The claim's, the rival's; the claim's again in a new transaction on
    # MariaDB (in the same one elsewhere: ``_read_state``).
    mariadb = getattr(db.engine.dialect, "is_mariadb", False)
    assert len(reads) == (3 if mariadb else 2)
    assert _generation(db, rp) == before + 2
    assert usage_obj.provider_usages(db, rp)[1] == {"VCPU": 7}
    for write, amount in ((claim, 3), (rival, 4)):
        found = allocation_reads.for_consumer(db, write.uuid)
        assert found.allocations[rp]["resources"] == {"VCPU": amount}
        assert found.generation == 1


def test_a_claim_whose_swap_lost_to_the_capacity_writes_nothing(db, monkeypatch):  # noqa: F811
    """The writer that won took the capacity the claim counted on: read
    again, the claim is refused (409), nothing of it written."""
    if db.dialect == "sqlite":
        pytest.skip("a SQLite writer holds the database: no one writes meanwhile")
    rp = _new_provider(db)  # 8 VCPU
    before = _generation(db, rp)
    claim, rival = _write(rp, amount=5), _write(rp, amount=6)
    _rival_after_first_read(db, monkeypatch, rival)
    with pytest.raises(alloc_obj.exception.Conflict, match="exceed the capacity"):
        alloc_obj.replace_allocations(db, [claim], check_generation=True)
    assert _generation(db, rp) == before + 1
    assert usage_obj.provider_usages(db, rp)[1] == {"VCPU": 6}
    assert allocation_reads.for_consumer(db, claim.uuid).allocations == {}
    with db.reader() as conn:
        assert alloc_obj.consumer_obj.existing(conn, [claim.uuid]).consumers == {}
