"""The allocation writer's server-side retry, on real SQLite, MySQL and PostgreSQL:
a generation swap lost for every provider (which changed nothing) reads
generations and usage again in the same transaction (on MariaDB, where a
new consumer's swap is sent with the COMMIT and checked there, in a new
one, without a pause); one lost for only some providers rolls back and is
retried in a NEW transaction. Either way up to
[placement] allocation_conflict_retry_count times, then it is a clean
ConcurrentUpdate and nothing was written.

The race is provoked deterministically by making the consistent read report
a generation one behind the stored one, as if another writer had committed
between our read and our swap.
"""

import uuid

import pytest

from placement import exception
from placement.objects import allocation as alloc_obj
from placement.objects import allocation_reads
from placement.objects import consumer as consumer_obj
from placement.objects import inventory as inv_obj
from tests import fixtures
from tests import helpers

RETRIES = 2


@pytest.fixture(params=fixtures.BACKENDS)
def db(request):
    fixtures.require_backend(request.param)
    with fixtures.overrides(**{"placement.allocation_conflict_retry_count": RETRIES}):
        with fixtures.database(request.param) as database:
            yield database


def _new_provider(db):
    """A provider with 8 VCPU, at generation 1."""
    rp_uuid = helpers.new_provider(db)
    inv_obj.replace_inventories(
        db, rp_uuid, 0, {"VCPU": inv_obj.with_defaults({"total": 8})}
    )
    return rp_uuid


@pytest.fixture
def provider(db):
    return _new_provider(db)


def _claim(rp_uuid, consumer_uuid=None, generation=None):
    return consumer_obj.ConsumerWrite(
        uuid=consumer_uuid or str(uuid.uuid4()),
        project_id="p",
        user_id="u",
        consumer_type=None,
        generation=generation,
        allocations={rp_uuid: {"VCPU": 2}},
    )


def _stale_reads(monkeypatch, stale_attempts, stale=None):
    """Make the first ``stale_attempts`` reads report generations one behind
    (of the providers in ``stale``, default all); returns the list of
    generations each attempt saw."""
    real = alloc_obj._read_state
    real_first = alloc_obj._existing_with_state
    seen = []

    def seen_stale(generations):
        seen.append(dict(generations))
        if len(seen) <= stale_attempts:
            return {
                rp: g - 1 if stale is None or rp in stale else g
                for rp, g in generations.items()
            }
        return generations

    def read_state(conn, *args):
        generations, capacity = real(conn, *args)
        return seen_stale(generations), capacity

    # A transaction's first read is the one that also reads the consumers.
    def existing_with_state(conn, *args):
        *existing, (generations, capacity) = real_first(conn, *args)
        return (*existing, (seen_stale(generations), capacity))

    monkeypatch.setattr(alloc_obj, "_read_state", read_state)
    monkeypatch.setattr(alloc_obj, "_existing_with_state", existing_with_state)
    return seen


def _transactions(monkeypatch):
    """Count the write transactions begun."""
    begun = []
    real = alloc_obj._transaction

    def transaction(db, attempt):
        begun.append(1)
        return real(db, attempt)

    monkeypatch.setattr(alloc_obj, "_transaction", transaction)
    return begun


def test_lost_swap_is_read_again_in_the_same_transaction(db, provider, monkeypatch):
    """On MariaDB a new consumer's claim sends its swap with the COMMIT,
    checked there: a lost one stops the query (nothing written) and is
    read again in a new transaction, at once (no jitter: it waited for
    the winner's commit, as the swap read in the transaction does)."""
    seen = _stale_reads(monkeypatch, stale_attempts=RETRIES)
    begun = _transactions(monkeypatch)
    paused = []
    monkeypatch.setattr(alloc_obj.time, "sleep", paused.append)
    claim = _claim(provider)
    alloc_obj.replace_allocations(db, [claim], check_generation=True)
    assert len(seen) == RETRIES + 1
    mariadb = getattr(db.engine.dialect, "is_mariadb", False)
    assert len(begun) == (RETRIES + 1 if mariadb else 1)
    assert paused == []
    # Every attempt re-read the same committed state: the lost swaps changed
    # nothing.
    assert all(s == seen[0] for s in seen)
    found = allocation_reads.for_consumer(db, claim.uuid)
    assert found.allocations[provider]["resources"] == {"VCPU": 2}
    assert found.allocations[provider]["generation"] == list(seen[0].values())[0] + 1
    assert found.generation == 1


def test_exhausted_retries_are_a_clean_conflict(db, provider, monkeypatch):
    seen = _stale_reads(monkeypatch, stale_attempts=RETRIES + 1)
    claim = _claim(provider)
    with pytest.raises(exception.ConcurrentUpdate) as raised:
        alloc_obj.replace_allocations(db, [claim], check_generation=True)
    assert len(seen) == RETRIES + 1
    assert raised.value.message == (
        "Inventory and/or allocations changed while attempting to allocate: "
        "Another thread concurrently updated the resource provider data. "
        "Please retry your update"
    )
    # Nothing of any attempt survived: no rows, no consumer, no generation.
    assert allocation_reads.for_consumer(db, claim.uuid).allocations == {}
    with db.reader() as conn:
        assert consumer_obj.existing(conn, [claim.uuid]) == ({}, {}, {})
    assert (
        allocation_reads.for_provider(db, provider).generation
        == list(seen[0].values())[0]
    )


def test_partly_lost_swap_is_retried_in_a_new_transaction(db, provider, monkeypatch):
    """A swap that moved some generations but not all rolls back: the
    retry begins a new transaction, and each provider moves by one."""
    other = _new_provider(db)
    with db.reader() as conn:
        stale_id = consumer_obj.existing(conn, [], [other]).providers[other]
    seen = _stale_reads(monkeypatch, stale_attempts=1, stale={stale_id})
    begun = _transactions(monkeypatch)
    claim = _claim(provider)
    claim.allocations[other] = {"VCPU": 1}
    alloc_obj.replace_allocations(db, [claim], check_generation=True)
    assert len(seen) == 2 and len(begun) == 2
    assert seen[0] == seen[1]
    found = allocation_reads.for_consumer(db, claim.uuid).allocations
    assert {rp: found[rp]["generation"] for rp in found} == {
        provider: 2,
        other: 2,
    }


def test_consumer_created_concurrently(db, provider, monkeypatch):
    """Another writer created the consumer after we looked it up: our insert
    collides, the retry sees it and reports the generation conflict."""
    first = _claim(provider)
    alloc_obj.replace_allocations(db, [first], check_generation=True)
    real = alloc_obj._existing_with_state
    calls = []

    # The write's first read (consumers, and the providers' state).
    def existing(conn, uuids, *args):
        calls.append(uuids)
        consumers, held, *rest = real(conn, uuids, *args)
        return ({}, {}, *rest) if len(calls) == 1 else (consumers, held, *rest)

    monkeypatch.setattr(alloc_obj, "_existing_with_state", existing)
    with pytest.raises(exception.ConcurrentUpdate) as raised:
        alloc_obj.replace_allocations(
            db, [_claim(provider, first.uuid)], check_generation=True
        )
    assert len(calls) == 2
    assert (
        "consumer generation conflict - expected 1 but got None" in raised.value.message
    )
    assert allocation_reads.for_consumer(db, first.uuid).generation == 1
