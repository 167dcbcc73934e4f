"""Allocations: reading them, and the write algorithm shared by
PUT /allocations/{c}, POST /allocations and the reshaper (doc/architecture.md
"Write rules").

A write is one transaction: one consistent read (a single statement) of the
generations, inventories and usage it checks, the checks, a compare-and-swap
of every touched provider's generation (seen -> seen + 1), then the consumer
and allocation rows. A swap that lost for every provider changed nothing:
PUT and POST /allocations read generations and usage again in the same
transaction and go on. A partly lost swap, or a lost consumer swap, rolls
the whole transaction back and ``run_write`` starts a new one that reads
everything again. Either way at most ``[placement]
allocation_conflict_retry_count`` times. No row locks: on MySQL the swap's
UPDATE waits for a competing writer's commit and then sees its new
generation.
"""

import dataclasses
import functools
import random
import time
import typing
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from placement import events
from placement import exception
from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects import consumer as consumer_obj
from placement.objects.catalog import refresh

ALLOC = tables.allocations
INV = tables.inventories
RP = tables.resource_providers
RC = tables.resource_classes
CONSUMERS = tables.consumers

PROVIDER_RACE = (
    "Another thread concurrently updated the resource provider "
    "data. Please retry your update"
)
CONSUMER_RACE = "Another thread concurrently updated the data. Please retry your update"
RETRY_JITTER_S = 0.005


class ProviderRace(exception.ConcurrentUpdate):
    """A provider generation moved between our read and our swap."""

    def __init__(self, message="resource provider generation changed", pause=True):
        super().__init__(message)
        self.pause = pause  # whether to pause (jitter) before the next try


# --------------------------------------------------------------- the write


def replace_allocations(
    db: db_api.Database,
    writes: list[consumer_obj.ConsumerWrite],
    check_generation: bool,
) -> None:
    """Replace the allocations of every consumer in ``writes`` (a list of
    ``consumer.ConsumerWrite``), all or nothing."""
    retries = Retries(db)

    def attempt(conn):
        prepared = prepare(conn, writes, check_generation, with_state=True)
        return write_in(conn, prepared, retries, last=True).learned

    try:
        learned = run_write(
            db,
            attempt,
            "Inventory and/or allocations changed while attempting to allocate: ",
            retries,
        )
    except exception.Conflict:
        # Refused on a host a search may have offered: if another writer
        # changed it, the next search sees that (doc/architecture.md,
        # "Writes by other writers").
        refresh.doubt(db)
        raise
    db_api.remember(db, learned)  # committed now


class Retries:
    """The retries left to one write (``[placement]
    allocation_conflict_retry_count``), in new transactions or not."""

    def __init__(self, db: db_api.Database) -> None:
        self.allowed = db.conf.placement.allocation_conflict_retry_count
        self.taken = 0

    def take(self) -> bool:
        """Whether the write may try again; counts the retry."""
        if self.taken >= self.allowed:
            return False
        self.taken += 1
        events.conflict_retry()
        return True


def run_write(
    db: db_api.Database,
    attempt: Callable[[sa.Connection], typing.Any],
    conflict_prefix: str,
    retries: Retries | None = None,
) -> typing.Any:
    """Run ``attempt(conn)`` in a writer transaction, re-running it in a new
    transaction when it lost a generation race (while ``retries``, shared
    with the attempt, allow)."""
    retries = retries or Retries(db)
    while True:
        try:
            return _transaction(db, attempt)
        except (ProviderRace, consumer_obj.ConsumerRace) as race:
            if not retries.take():
                message = (
                    PROVIDER_RACE if isinstance(race, ProviderRace) else CONSUMER_RACE
                )
                raise exception.ConcurrentUpdate(conflict_prefix + message)
            # Jitter so that racing writers do not collide again in step.
            if getattr(race, "pause", True):
                time.sleep(random.uniform(0, RETRY_JITTER_S * retries.taken))


@db_api.retry_on_deadlock
def _transaction(db, attempt):
    """``attempt(conn)`` in one write transaction. When its COMMIT failed
    what it noted it leaves (``_expect``) is read back first
    (``db_api.expect``): if that is there the write was done and its
    result is returned; only otherwise is the error raised (and, a
    deadlock, retried)."""
    try:
        with db.writer() as conn:
            return attempt(conn)
    except sa_exc.IntegrityError as e:
        if consumer_obj.is_created_concurrently(e):
            # Raised by the statement, or on MySQL by the COMMIT it was
            # sent with (``write_in``): nothing was written either way.
            raise consumer_obj.ConsumerRace("consumer created concurrently") from e
        raise
    except sa_exc.DBAPIError as e:
        lost = common.lost_swap(e)
        if lost is None:
            raise
        # The swap sent with the COMMIT lost (``write_in``), nothing was
        # written. Lost for every provider, it waited for the winner's
        # commit, which the next read sees: no pause before it, as when
        # the swap is read in the transaction.
        raise ProviderRace(pause=lost == "some") from e


def _expect(conn: sa.Connection, outcome: dict) -> None:
    """Note what this transaction leaves once committed (``db_api.expect``):
    {consumer uuid: (its generation, or None for no record; its allocation
    rows as {(provider id, class id, used)})}. The consumer generations
    tell one write from another: each write moves them (a new consumer's
    is 1)."""
    db_api.expect(conn, _written, outcome)


def _written(conn: sa.Connection, expected: dict) -> bool:
    """Whether the database holds what ``expected`` (``_expect``) says:
    the consumer records' generations and the allocation rows."""
    uuids = list(expected)
    generations: dict[str, int] = dict(
        conn.execute(
            sa.select(CONSUMERS.c.uuid, CONSUMERS.c.generation)
            .where(CONSUMERS.c.uuid.in_(uuids))
            .with_for_update(read=True)
        ).all()
    )
    rows: dict[str, set] = {}
    for uuid, rp, rc, used in conn.execute(
        sa.select(
            ALLOC.c.consumer_id,
            ALLOC.c.resource_provider_id,
            ALLOC.c.resource_class_id,
            ALLOC.c.used,
        ).where(ALLOC.c.consumer_id.in_(uuids))
    ):
        rows.setdefault(uuid, set()).add((rp, rc, used))
    return all(
        generations.get(uuid) == generation and rows.get(uuid, set()) == allocations
        for uuid, (generation, allocations) in expected.items()
    )


@dataclasses.dataclass
class _Prepared:
    writes: list
    consumers: dict  # {uuid: consumer row} of existing consumers
    providers: dict  # {uuid: id} of every provider named
    held: dict  # {uuid: {provider ids}} of their allocations
    # (generations, capacity) of the named providers as ``_read_state``
    # gives them, read in the same statement as the consumers; None when
    # not read (the reshaper writes inventories before it checks)
    state: tuple | None = None
    class_ids: dict | None = None  # {name: id} of the classes named, if
    # looked up with the state


class Written(typing.NamedTuple):
    touched: set[int]  # the providers whose generation moved
    learned: db_api.Learned  # to remember after commit


def prepare(
    conn: sa.Connection,
    writes: list[consumer_obj.ConsumerWrite],
    check_generation: bool,
    with_state: bool = False,
) -> "_Prepared":
    """The checks that come before any change: consumer generations (from
    1.28) in body order, then that every named provider exists (400).
    ``with_state``: the statement that reads the consumers also reads the
    named providers' generations, inventories and usage, which
    ``write_in`` then checks and swaps without reading them again (one
    round trip less per claim; only for a write that changes nothing
    before ``write_in``)."""
    named = [rp for w in writes for rp in w.allocations]
    uuids = [w.uuid for w in writes]
    class_ids = _known_class_ids(conn, writes) if with_state else None
    state = None
    if class_ids is None:
        consumers, held, providers = consumer_obj.existing(conn, uuids, named)
    else:
        consumers, held, providers, state = _existing_with_state(
            conn, uuids, named, class_ids.values()
        )
    if check_generation:
        consumer_obj.check_generations(writes, consumers)
    for rp_uuid in named:
        if rp_uuid not in providers:
            raise exception.BadRequest(
                "Allocation for resource provider '%s' that does not exist." % rp_uuid
            )
    return _Prepared(writes, consumers, providers, held, state, class_ids)


def _class_ids(
    conn: sa.Connection, writes: list[consumer_obj.ConsumerWrite]
) -> dict[str, int]:
    """{name: id} of the classes the writes name, in body order;
    ResourceClassNotFound for the first unknown one."""
    names = [rc for w in writes for res in w.allocations.values() for rc in res]
    return common.resource_class_ids(conn, dict.fromkeys(names), cached=True)


def _known_class_ids(
    conn: sa.Connection, writes: list[consumer_obj.ConsumerWrite]
) -> dict[str, int] | None:
    """``_class_ids``, or None when one is unknown (``write_in`` reports
    it, after the checks that come first)."""
    try:
        return _class_ids(conn, writes)
    except exception.ResourceClassNotFound:
        return None


_DELETE = ALLOC.delete().where(
    ALLOC.c.consumer_id.in_(sa.bindparam("uuids", expanding=True))
)
_INSERT = ALLOC.insert()


def write_in(
    conn: sa.Connection,
    prepared: _Prepared,
    retries: Retries | None = None,
    last: bool = False,
) -> Written:
    """Steps 2-5 of the write inside the caller's transaction; returns the
    ids of the providers whose generation it moved and the ids it
    learned. With ``retries``, a swap lost for every provider (which
    changed nothing) reads and checks again in this transaction: under
    READ COMMITTED the read sees the winner's commit, which the swap's
    UPDATE waited for. Only PUT and POST /allocations may: the reshaper
    wrote before. ``last``: nothing but ``db_api.at_commit`` statements
    follows in the transaction, so what comes after the swaps (the
    consumer and allocation rows, nothing of which is read) is sent with
    the COMMIT."""
    writes = prepared.writes
    rc_ids = prepared.class_ids or _class_ids(conn, writes)
    new_rows = [
        {
            "consumer_id": w.uuid,
            "resource_provider_id": prepared.providers[rp],
            "resource_class_id": rc_ids[rc],
            "used": amount,
        }
        for w in writes
        for rp, res in w.allocations.items()
        for rc, amount in res.items()
    ]
    uuids = [w.uuid for w in writes]
    emptied = [w.uuid for w in writes if not w.allocations]
    # Providers whose generation moves: those in the new set, and those an
    # emptied consumer had allocations on.
    touched = {r["resource_provider_id"] for r in new_rows}
    for uuid in emptied:
        touched.update(prepared.held.get(uuid, ()))
    state = prepared.state
    # Everything after the swap is held for the COMMIT (only new consumers:
    # an existing one's swap is read): the swap can go with it.
    held_to_the_end = last and not any(u in prepared.consumers for u in uuids)
    while touched:
        if state is not None and touched <= state[0].keys():
            generations, capacity = state  # read with the consumers
        else:
            generations, capacity = _read_state(
                conn, touched, set(rc_ids.values()), uuids
            )
        state = None
        _check_capacity(
            new_rows,
            capacity,
            {v: k for k, v in rc_ids.items()},
            {v: k for k, v in prepared.providers.items()},
        )
        seen = {rp: generations[rp] for rp in touched}
        if held_to_the_end and common.swap_at_commit(conn, seen):
            break  # checked at the COMMIT: ``_transaction``
        swapped = common.swap_count(conn, seen)
        if swapped == len(touched):
            break
        if swapped or retries is None or not retries.take():
            raise ProviderRace()
    _expect(conn, _outcome(prepared, new_rows))
    learned = consumer_obj.save(conn, writes, prepared.consumers, at_commit=last)
    execute = functools.partial(db_api.at_commit, conn) if last else conn.execute
    # Only consumers seen holding allocations can hold any now: another
    # writer giving some to one of the others first creates or swaps its
    # consumer row, which makes the save above (or the commit) fail.
    holding = [u for u in uuids if u in prepared.held]
    if holding:
        execute(_DELETE, {"uuids": holding})
    if new_rows:
        db_api.plain_insert(conn, _INSERT, new_rows, at_commit=last)
    return Written(touched, learned)


def _outcome(prepared: _Prepared, new_rows: list[dict]) -> dict:
    """What ``write_in`` leaves (``_expect``): a consumer keeping
    allocations has generation + 1 (a new one 1), an emptied one no
    record, each exactly its new rows."""
    outcome: dict = {}
    for write in prepared.writes:
        found = prepared.consumers.get(write.uuid)
        generation = None
        if write.allocations:
            generation = found["generation"] + 1 if found is not None else 1
        outcome[write.uuid] = (generation, set())
    for row in new_rows:
        outcome[row["consumer_id"]][1].add(
            (row["resource_provider_id"], row["resource_class_id"], row["used"])
        )
    return outcome


@dataclasses.dataclass
class _Capacity:
    inventory: dict  # the inventory row
    used: int  # usage by every consumer
    used_by_writers: int  # of which by the consumers being rewritten


def _state_query(by_uuid=False):
    """The statement of ``_read_state``, of the providers whose ids are
    bound as ``providers``, or (``by_uuid``) whose uuids are bound as
    ``named``, the state row then starting with the kind 2 and the
    provider's uuid, and padded to the consumer rows' columns, for
    ``_EXISTING_WITH_STATE``."""
    classes = sa.bindparam("classes", expanding=True)
    consumers = sa.bindparam("consumers", expanding=True)
    if by_uuid:
        of_providers = RP.c.uuid.in_(sa.bindparam("named", expanding=True))
        leading = [sa.literal_column("2", sa.Integer).label("kind"), RP.c.id, RP.c.uuid]
        padding = [sa.cast(sa.null(), sa.Integer)] * 3
    else:
        of_providers = RP.c.id.in_(sa.bindparam("providers", expanding=True))
        leading, padding = [RP.c.id], []
    # Each inventory's usage by correlated sums (over the index of
    # provider, class and amount; the writers' over their consumer's
    # index): a derived table grouped and joined instead cost MariaDB a
    # temporary table per claim, 20% more of its CPU for this statement.
    of_inventory = sa.and_(
        ALLOC.c.resource_provider_id == INV.c.resource_provider_id,
        ALLOC.c.resource_class_id == INV.c.resource_class_id,
    )
    used = sa.select(sa.func.sum(ALLOC.c.used)).where(of_inventory)
    return (
        sa.select(
            *leading,
            RP.c.generation,
            *padding,
            INV.c.resource_class_id,
            INV.c.total,
            INV.c.reserved,
            INV.c.min_unit,
            INV.c.max_unit,
            INV.c.step_size,
            INV.c.allocation_ratio,
            used.scalar_subquery().label("used"),
            used.where(ALLOC.c.consumer_id.in_(consumers))
            .scalar_subquery()
            .label("used_by_writers"),
        )
        .select_from(
            RP.outerjoin(
                INV,
                sa.and_(
                    INV.c.resource_provider_id == RP.c.id,
                    INV.c.resource_class_id.in_(classes),
                ),
            )
        )
        .where(of_providers)
    )


# Built once: building it per write would compute its cache key each time.
_STATE = _state_query()


def _existing_with_state_query():
    """``consumer.existing``'s consumers and the providers they hold, and
    the state of the named providers, in one statement: rows of kind 0
    (consumer), 1 (a provider it holds allocations on) and 2 (state: the
    consumer's columns, then ``_STATE``'s)."""
    state = _state_query(by_uuid=True)
    nulls = [
        sa.cast(sa.null(), c.type).label(c.name)
        for c in list(state.selected_columns)[7:]
    ]
    return sa.union_all(*consumer_obj.existing_selects(*nulls), state)


_EXISTING_WITH_STATE = _existing_with_state_query()
_EXISTING_WITH_STATE_COLUMNS = tuple(_EXISTING_WITH_STATE.selected_columns.keys())


def _existing_with_state(conn, uuids, named, class_ids):
    """``consumer.existing`` of ``uuids`` and ``named`` (provider uuids),
    and ``_read_state`` of the named providers: one statement, on the
    driver's cursor (``db_api.plain_rows``: every claim's PUT reads it)."""
    found, held, providers = {}, {}, {}
    generations, capacity = {}, {}
    consumers = list(set(uuids))
    rows = db_api.plain_rows(
        conn,
        _EXISTING_WITH_STATE,
        {
            "uuids": consumers,
            "consumers": consumers,
            "named": list(set(named)),
            "classes": list(set(class_ids)),
        },
    )
    for values in rows:
        row = dict(zip(_EXISTING_WITH_STATE_COLUMNS, values))
        kind = row["kind"]
        if kind == 0:
            found[row["uuid"]] = row
        elif kind == 1:
            held.setdefault(row["uuid"], set()).add(row["id"])
        else:
            providers[row["uuid"]] = row["id"]
            _add_state(row, generations, capacity)
    return found, held, providers, (generations, capacity)


def _read_state(conn, provider_ids, class_ids, consumer_uuids):
    """Generations of ``provider_ids`` and, for their inventories of
    ``class_ids``, the current usage: ONE statement, so the usage is exactly
    as old as the generation that the write later swaps."""
    generations, capacity = {}, {}
    rows = conn.execute(
        _STATE,
        {
            "providers": list(provider_ids),
            "classes": list(class_ids),
            "consumers": list(consumer_uuids),
        },
    ).mappings()
    for row in rows:
        _add_state(row, generations, capacity)
    return generations, capacity


def _add_state(row, generations, capacity):
    """One row of ``_STATE`` into ``_read_state``'s answer."""
    generations[row["id"]] = row["generation"]
    if row["resource_class_id"] is not None:
        capacity[row["id"], row["resource_class_id"]] = _Capacity(
            row, int(row["used"] or 0), int(row["used_by_writers"] or 0)
        )


def _check_capacity(new_rows, capacity, rc_names, rp_uuids):
    """The capacity check of the write: inventory exists, amount within the
    inventory's constraints, and the total fits (or does not worsen an
    existing over-commit)."""

    def conflict(message):
        return exception.Conflict("Unable to allocate inventory: " + message)

    with_inventory = {rp for rp, _ in capacity}
    bare = list(
        dict.fromkeys(
            r["resource_provider_id"]
            for r in new_rows
            if r["resource_provider_id"] not in with_inventory
        )
    )
    if bare:
        # Class names in messages are in class id order.
        classes = sorted({r["resource_class_id"] for r in new_rows})
        raise conflict(
            "Inventory for '%s' on resource provider '%s' invalid."
            % (
                ", ".join(rc_names[rc] for rc in classes),
                ", ".join(rp_uuids[rp] for rp in bare),
            )
        )
    needed = {}
    for r in new_rows:
        key = r["resource_provider_id"], r["resource_class_id"]
        needed[key] = needed.get(key, 0) + r["used"]
    for r in new_rows:
        key = r["resource_provider_id"], r["resource_class_id"]
        names = rc_names[key[1]], rp_uuids[key[0]]
        cap = capacity.get(key)
        if cap is None:
            raise conflict(
                "Inventory for '%s' on resource provider '%s' invalid." % names
            )
        inv, amount = cap.inventory, r["used"]
        if (
            amount < inv["min_unit"]
            or amount > inv["max_unit"]
            or amount % inv["step_size"]
        ):
            raise conflict(
                "Unable to create allocation for '%s' on resource "
                "provider '%s'. The requested amount would violate "
                "inventory constraints." % names
            )
        limit = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
        used = cap.used - cap.used_by_writers
        if used + needed[key] > limit and used + needed[key] > cap.used:
            raise conflict(
                "Unable to create allocation for '%s' on resource "
                "provider '%s'. The requested amount would exceed "
                "the capacity." % names
            )


# ------------------------------------------------------------- the delete


def delete_consumer_allocations(db: db_api.Database, consumer_uuid: str) -> None:
    """Remove every allocation of a consumer and its record; provider
    generations do not move. ConsumerNotFound when it has none."""

    def attempt(conn):
        deleted = conn.execute(
            ALLOC.delete().where(
                common.text_exactly(conn, ALLOC.c.consumer_id, consumer_uuid)
            )
        ).rowcount
        if not deleted:
            raise exception.ConsumerNotFound(
                "No allocations for consumer '%s'" % consumer_uuid
            )
        consumer_obj.delete_records(conn, [consumer_uuid])
        _expect(conn, {consumer_uuid: (None, set())})

    _transaction(db, attempt)
