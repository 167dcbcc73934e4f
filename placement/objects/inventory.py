"""Inventories: what each provider offers, one record per resource class.

Every write is one transaction that first takes the provider row: by the
generation compare-and-swap, or (replacing the whole inventory) by reading
it locked, the generation's move then only written with the COMMIT. The
provider row is held by this writer until commit, so the in-use checks
that follow read allocations no allocation writer can change underneath
(they swap the same generation).
"""

import contextlib
import struct
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from placement import exception
from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects import outcome
from placement.objects import resource_provider as rp_obj
from placement.objects.catalog import changes
from placement.objects.catalog import consumer_columns
from placement.schemas import inventory as schema

INV = tables.inventories
RC = tables.resource_classes
ALLOC = tables.allocations

_RECORD_COLUMNS = (
    INV.c.total,
    INV.c.reserved,
    INV.c.min_unit,
    INV.c.max_unit,
    INV.c.step_size,
    INV.c.allocation_ratio,
)


_INSERT = INV.insert()  # built once, and its cache key


class InventoryNotFound(exception.NotFound):
    pass


def with_defaults(record: Mapping[str, Any]) -> dict[str, Any]:
    """The six record fields, defaults filled in, extra keys dropped; the
    ratio as it will be stored (``stored_ratio``), which the write then
    answers as every backend reads it back (the integers as they were
    sent: the contract echoes "total": 4.0 as 4.0)."""
    values = {
        field: record.get(field, schema.DEFAULTS.get(field)) for field in schema.FIELDS
    }
    values["allocation_ratio"] = stored_ratio(values["allocation_ratio"])
    return values


# The largest float32: MySQL's FLOAT column holds no more.
_FLOAT32_MAX = 3.4028234663852886e38


def stored_ratio(value: float) -> float:
    """``value`` as every database stores and answers it. MySQL's FLOAT
    column holds a float32 and answers it in 6 significant digits (so
    0.1234567 reads back 0.123457 and 1e-300 as 0.0); the ratio is rounded
    so before it is stored, on every database, and stored -0.0 as 0.0 (as
    MySQL answers it): every backend then answers what the write answered.
    Below -3.40282e38 (refused by ``check_capacity``, whatever rounding
    would make of it) it is left alone."""
    value = float(value)
    if -schema.MAX_FLOAT <= value <= _FLOAT32_MAX:
        value = float("%.6g" % struct.unpack("f", struct.pack("f", value))[0])
    return value + 0.0


def capacity(record: Mapping[str, Any]) -> int:
    return int((record["total"] - record["reserved"]) * record["allocation_ratio"])


def check_capacity(
    provider_uuid: str,
    records: Mapping[str, Mapping[str, Any]],
    allow_reserved_equal_total: bool,
) -> None:
    """BadRequest for the first record whose capacity is not allowed.

    ``records`` maps class name to a record with defaults applied.
    """
    for rc_name, record in records.items():
        # The schema bounds the ratio above only (as upstream's does): a
        # ratio below the float column's range would overflow the capacity
        # or the column, so it is refused here.
        if record["allocation_ratio"] < -schema.MAX_FLOAT:
            raise exception.BadRequest(
                "Invalid inventory for '%s' on resource provider '%s'. The "
                "allocation_ratio is less than the minimum of %s."
                % (rc_name, provider_uuid, -schema.MAX_FLOAT)
            )
        cap = capacity(record)
        if cap < 0 or (cap == 0 and not allow_reserved_equal_total):
            relation = (
                "greater than"
                if allow_reserved_equal_total
                else "greater than or equal to"
            )
            raise exception.BadRequest(
                "Invalid inventory for '%s' on resource provider '%s'. "
                "The reserved value is %s total." % (rc_name, provider_uuid, relation)
            )


def check_generation(
    provider: Mapping[str, Any] | sa.RowMapping, generation: int
) -> None:
    if provider["generation"] != generation:
        raise exception.ConcurrentUpdate("resource provider generation conflict")


def stored_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """The six record fields of an inventory row."""
    record = {field: row[field] for field in schema.FIELDS}
    record["allocation_ratio"] = float(record["allocation_ratio"])
    return record


# The columns of an inventory as the reads return it.
_READ_COLUMNS = (
    RC.c.name.label("resource_class"),
    *_RECORD_COLUMNS,
    INV.c.created_at,
    INV.c.updated_at,
)


# get_inventories' statement, built once (and its cache key): the provider
# and its inventories in one round trip.
_INVENTORIES = common.provider_rows_statement(
    _READ_COLUMNS,
    INV.join(RC, RC.c.id == INV.c.resource_class_id),
    INV.c.resource_provider_id == common.RP.c.id,
).order_by(INV.c.resource_class_id)


def get_inventories(
    db: db_api.Database, uuid: str
) -> tuple[int, Sequence[Mapping[Any, Any]]]:
    """(provider generation, inventory rows) for one provider, in class id
    order. From the catalog when ``rp_obj.held`` finds the provider there,
    after that one statement, each row's time their latest (all that
    Last-Modified shows, ``request.last_modified_of``); otherwise by one
    SQL statement."""
    with db.single_read() as conn:
        found = rp_obj.held(db, conn, uuid)
        if found is None:
            return common.provider_rows(conn, _INVENTORIES, uuid, "resource_class")
    names = found.catalog.class_names
    latest = None if found.stocked is None else consumer_columns.time_of(found.stocked)
    return found.generation, [
        {
            "resource_class": names[rc],
            "total": inventory.total,
            "reserved": inventory.reserved,
            "min_unit": inventory.min_unit,
            "max_unit": inventory.max_unit,
            "step_size": inventory.step_size,
            "allocation_ratio": inventory.allocation_ratio,
            "created_at": None,
            "updated_at": latest,
        }
        for rc, inventory in found.catalog.by_provider.get(found.rp, ())
    ]


def get_inventory(
    db: db_api.Database, uuid: str, rc_name: str
) -> tuple[int, sa.RowMapping]:
    """(provider generation, inventory row) or InventoryNotFound."""
    # A name the database cannot hold names no class (NULL matches none).
    wanted = rc_name if db_api.holds_text(db.dialect, rc_name) else None
    with db.single_read() as conn:
        generation, rows = common.provider_rows(
            conn, _INVENTORY, uuid, "resource_class", {"b_rc": wanted}
        )
    row = next(iter(common.exact(rows, "resource_class", rc_name)), None)
    if row is None:
        raise InventoryNotFound("No inventory of class %s for %s" % (rc_name, uuid))
    return generation, row


# get_inventory's statement, built once (and its cache key): the provider
# and its inventory of one class (b_rc) in one round trip.
_INVENTORY = common.provider_rows_statement(
    _READ_COLUMNS,
    INV.join(
        RC,
        sa.and_(RC.c.id == INV.c.resource_class_id, RC.c.name == sa.bindparam("b_rc")),
    ),
    INV.c.resource_provider_id == common.RP.c.id,
)


def _values(record):
    """Column values; integral floats such as 4.0 are valid integers."""
    values = {field: int(record[field]) for field in schema.FIELDS}
    values["allocation_ratio"] = stored_ratio(record["allocation_ratio"])
    return values


def _in_use_class_names(conn, provider_id, rc_ids):
    """Sorted names of the classes among ``rc_ids`` that have allocations."""
    if not rc_ids:
        return []
    return list(
        conn.scalars(
            sa.select(RC.c.name)
            .where(
                RC.c.id.in_(rc_ids),
                sa.exists().where(
                    ALLOC.c.resource_provider_id == provider_id,
                    ALLOC.c.resource_class_id == RC.c.id,
                ),
            )
            .order_by(RC.c.id)
        )
    )


def _in_use_message(rc_names, provider_uuid):
    return "Inventory for '%s' on resource provider '%s' in use." % (
        ", ".join(rc_names),
        provider_uuid,
    )


@contextlib.contextmanager
def _write(
    db: db_api.Database,
    uuid: str,
    conflict: str,
    generation: int | None = None,
    rc_name: str | None = None,
) -> Iterator[tuple[sa.Connection, int, Any, int]]:
    """The write transaction of one change to provider ``uuid``'s
    inventory, as (connection, provider id, class id, new generation): the
    provider read (NotFound), the id of class ``rc_name`` if given
    (ResourceClassNotFound), then the generation swapped from
    ``generation``, or from the one just read (ConcurrentUpdate saying
    ``conflict`` when lost). The catalog's log records the change when the
    block ends."""
    with db.writer() as conn:
        provider = common.get_provider(conn, uuid)
        rc_id = None
        if rc_name is not None:
            rc_id = common.resource_class_ids(conn, [rc_name])[rc_name]
        if generation is None:
            generation = provider["generation"]
        new_generation = common.bump_generation(
            conn, provider["id"], generation, conflict
        )
        yield conn, provider["id"], rc_id, new_generation
        changes.record(conn, changes.PROVIDER, [provider["id"]])


def _leaves(conn, provider_id, uuid, generation, records, every=False):
    """Note what the write leaves (``outcome``): the provider at
    ``generation`` with ``records`` ({class id: column values, or None
    for none}), and (``every``) no other inventory."""
    outcome.provider(
        conn,
        provider_id,
        outcome.Leaves(
            uuid, generation=generation, inventories=records, all_inventories=every
        ),
    )


@db_api.retry_on_deadlock
def create_inventory(
    db: db_api.Database, uuid: str, rc_name: str, record: Mapping[str, Any]
) -> int:
    """Add one record; returns the new provider generation.

    No generation is taken from the client: the one read here is swapped.
    """
    with _write(
        db,
        uuid,
        "Update conflict: resource provider %s was changed by another process." % uuid,
        rc_name=rc_name,
    ) as (conn, provider_id, rc_id, generation):
        exists = conn.scalar(
            sa.select(INV.c.id).where(
                INV.c.resource_provider_id == provider_id,
                INV.c.resource_class_id == rc_id,
            )
        )
        if exists is not None:
            raise exception.ConcurrentUpdate(
                "Update conflict: Inventory for '%s' on resource provider "
                "'%s' already exists." % (rc_name, uuid)
            )
        values = _values(record)
        conn.execute(
            INV.insert().values(
                resource_provider_id=provider_id, resource_class_id=rc_id, **values
            )
        )
        _leaves(conn, provider_id, uuid, generation, {rc_id: values})
    return generation


@db_api.retry_on_deadlock
def replace_inventories(
    db: db_api.Database,
    uuid: str,
    generation: int,
    records: Mapping[str, Mapping[str, Any]],
) -> int:
    """Make ``records`` ({class name: record}) the provider's whole
    inventory if its generation is still ``generation``; returns the new
    provider generation."""
    with db.writer() as conn:
        # Held from here on: what is read is current until commit.
        provider, existing = common.get_provider_with(
            conn, uuid, INV.c.resource_class_id, lock=True
        )
        check_generation(provider, generation)
        rc_ids = common.resource_class_ids(conn, records, cached=True)
        wanted = {rc_ids[name]: record for name, record in records.items()}
        removed = existing - set(wanted)
        in_use = _in_use_class_names(conn, provider["id"], removed)
        if in_use:
            raise exception.InventoryInUse(
                "update conflict: " + _in_use_message(in_use, uuid)
            )
        # What is left to write is only written: it goes with the COMMIT.
        new_generation = common.bump_held(conn, provider)
        if removed:
            db_api.at_commit(
                conn,
                INV.delete().where(
                    INV.c.resource_provider_id == provider["id"],
                    INV.c.resource_class_id.in_(removed),
                ),
            )
        added = [
            dict(
                _values(record),
                resource_provider_id=provider["id"],
                resource_class_id=rc_id,
            )
            for rc_id, record in wanted.items()
            if rc_id not in existing
        ]
        if added:
            db_api.at_commit(conn, _INSERT, added)
        updated = [
            dict(_values(record), b_rc_id=rc_id)
            for rc_id, record in wanted.items()
            if rc_id in existing
        ]
        if updated:
            # One executemany for all updated classes.
            db_api.at_commit(
                conn,
                INV.update().where(
                    INV.c.resource_provider_id == provider["id"],
                    INV.c.resource_class_id == sa.bindparam("b_rc_id"),
                ),
                updated,
            )
        changes.record(conn, changes.PROVIDER, [provider["id"]])
        _leaves(
            conn,
            provider["id"],
            uuid,
            new_generation,
            {rc_id: _values(record) for rc_id, record in wanted.items()},
            every=True,
        )
    return new_generation


@db_api.retry_on_deadlock
def update_inventory(
    db: db_api.Database,
    uuid: str,
    generation: int,
    rc_name: str,
    record: Mapping[str, Any],
) -> int:
    """Overwrite the provider's existing record of ``rc_name``; returns the
    new provider generation."""
    with _write(
        db,
        uuid,
        "update conflict: resource provider %s generation changed concurrently." % uuid,
        generation,
        rc_name,
    ) as (conn, provider_id, rc_id, new_generation):
        values = _values(record)
        result = conn.execute(
            INV.update()
            .where(
                INV.c.resource_provider_id == provider_id,
                INV.c.resource_class_id == rc_id,
            )
            .values(**values)
        )
        if result.rowcount != 1:
            raise InventoryNotFound("No inventory of class %s found." % rc_name)
        _leaves(conn, provider_id, uuid, new_generation, {rc_id: values})
    return new_generation


@db_api.retry_on_deadlock
def delete_inventory(db: db_api.Database, uuid: str, rc_name: str) -> None:
    """Remove one record unless it has allocations."""
    with _write(
        db,
        uuid,
        "Inventory for '%s' on resource provider '%s' was changed by "
        "another process." % (rc_name, uuid),
        rc_name=rc_name,
    ) as (conn, provider_id, rc_id, new_generation):
        where = (
            INV.c.resource_provider_id == provider_id,
            INV.c.resource_class_id == rc_id,
        )
        if conn.scalar(sa.select(INV.c.id).where(*where)) is None:
            raise InventoryNotFound(
                "No inventory of class %s found for delete" % rc_name
            )
        if _in_use_class_names(conn, provider_id, [rc_id]):
            raise exception.InventoryInUse(_in_use_message([rc_name], uuid))
        conn.execute(INV.delete().where(*where))
        _leaves(conn, provider_id, uuid, new_generation, {rc_id: None})


@db_api.retry_on_deadlock
def delete_inventories(db: db_api.Database, uuid: str) -> None:
    """Remove every record unless any has allocations."""
    with _write(
        db,
        uuid,
        "Unable to delete inventory for resource provider %s because "
        "the inventory was updated by another process. Please retry "
        "your request." % uuid,
    ) as (conn, provider_id, _, new_generation):
        existing = list(
            conn.scalars(
                sa.select(INV.c.resource_class_id).where(
                    INV.c.resource_provider_id == provider_id
                )
            )
        )
        in_use = _in_use_class_names(conn, provider_id, existing)
        if in_use:
            raise exception.InventoryInUse(_in_use_message(in_use, uuid))
        conn.execute(INV.delete().where(INV.c.resource_provider_id == provider_id))
        _leaves(conn, provider_id, uuid, new_generation, {}, every=True)
