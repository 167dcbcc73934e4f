"""The round trips of an allocation write, on SQLite, MySQL and
PostgreSQL: a claim (PUT /allocations of a new consumer, as nova's
scheduler makes one per instance) reads the consumers and the providers'
generations, inventories and usage in one statement, then swaps the
generations and writes; a write that empties a consumer reads the state of
the providers it held as well, and moves their generations."""

import contextlib
import uuid

import pytest
from sqlalchemy import event

from placement.objects import allocation as alloc_obj
from placement.objects import consumer as consumer_obj
from placement.objects import usage as usage_obj
from tests import fixtures
from tests.functional.test_allocation_retry import _new_provider


@pytest.fixture(params=fixtures.BACKENDS)
def db(request):
    fixtures.require_backend(request.param)
    with fixtures.database(request.param) as database:
        yield database


@contextlib.contextmanager
def statements(db):
    """The first word of every SELECT, INSERT, UPDATE and DELETE run
    meanwhile (not SQLite's BEGIN, nor the catalog's log pruning)."""
    seen = []

    def record(conn, cursor, statement, *args):
        head = statement.lstrip().split(None, 1)[0].upper()
        if head in ("SELECT", "INSERT", "UPDATE", "DELETE"):
            seen.append(head)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def _write(rp_uuid, consumer_uuid=None, amount=2, generation=None):
    return consumer_obj.ConsumerWrite(
        uuid=consumer_uuid or str(uuid.uuid4()),
        project_id="p",
        user_id="u",
        consumer_type=None,
        generation=generation,
        allocations={rp_uuid: {"VCPU": amount}} if amount else {},
    )


def _generation(db, rp_uuid):
    with db.reader() as conn:
        return alloc_obj.common.get_provider(conn, rp_uuid)["generation"]


def test_a_claim_reads_once_before_it_swaps(db):
    rp = _new_provider(db)
    # The first claim learns the project's and user's ids.
    alloc_obj.replace_allocations(db, [_write(rp)], check_generation=True)
    claim = _write(rp, amount=3)
    before = _generation(db, rp)
    with statements(db) as seen:
        alloc_obj.replace_allocations(db, [claim], check_generation=True)
    assert seen == ["SELECT", "UPDATE", "INSERT", "INSERT"]
    assert _generation(db, rp) == before + 1
    found = alloc_obj.for_consumer(db, claim.uuid)
    assert found.allocations[rp]["resources"] == {"VCPU": 3}
    assert found.generation == 1


def test_a_claim_over_capacity_is_refused_from_the_first_read(db):
    rp = _new_provider(db)  # 8 VCPU
    first = _write(rp, amount=6)
    alloc_obj.replace_allocations(db, [first], check_generation=True)
    with pytest.raises(alloc_obj.exception.Conflict, match="exceed the capacity"):
        alloc_obj.replace_allocations(db, [_write(rp, amount=3)], check_generation=True)
    # The consumer's own allocations do not count against it: 6 -> 8 fits.
    grown = _write(rp, first.uuid, amount=8, generation=1)
    alloc_obj.replace_allocations(db, [grown], check_generation=True)
    assert usage_obj.provider_usages(db, rp)[1] == {"VCPU": 8}


def test_emptying_a_consumer_reads_and_moves_the_providers_it_held(db):
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
    assert seen[:3] == ["SELECT", "SELECT", "UPDATE"]
    assert (_generation(db, held), _generation(db, other)) == (
        before[0] + 1,
        before[1] + 1,
    )
    assert alloc_obj.for_consumer(db, leaving.uuid).allocations == {}
