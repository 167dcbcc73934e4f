"""Resource providers: create, read, rename/re-parent, delete.

A provider is returned as a mapping with ``id``, ``uuid``, ``name``,
``generation``, ``parent_provider_uuid``, ``root_provider_uuid``,
``created_at`` and ``updated_at``. Listing lives in provider_list.py, tree
walking in provider_tree.py.
"""

import typing
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from placement import exception
from placement.db import api as db_api
from placement.db import tables
from placement.objects import common
from placement.objects import outcome
from placement.objects import provider_tree
from placement.objects.catalog import changes
from placement.objects.catalog import consumer_columns
from placement.objects.catalog import refresh
from placement.objects.catalog import store

RP = tables.resource_providers
PARENT = RP.alias("parent_provider")
ROOT = RP.alias("root_provider")

# update() argument meaning "leave the parent as it is".
UNCHANGED = object()

SAME_AS_PARENT = (
    "parent provider UUID cannot be same as UUID. Please set "
    "parent provider UUID to None if there is no parent."
)


def select_providers() -> sa.Select[Any]:
    """SELECT of provider mappings; callers add WHERE clauses."""
    return sa.select(
        RP.c.id,
        RP.c.uuid,
        RP.c.name,
        RP.c.generation,
        RP.c.created_at,
        RP.c.updated_at,
        PARENT.c.uuid.label("parent_provider_uuid"),
        ROOT.c.uuid.label("root_provider_uuid"),
    ).select_from(
        RP.outerjoin(PARENT, PARENT.c.id == RP.c.parent_provider_id).outerjoin(
            ROOT, ROOT.c.id == RP.c.root_provider_id
        )
    )


def _fetch(conn, uuid):
    return next(iter(common._by_uuid(conn, _FETCH, uuid, "uuid")), None)


# _fetch's statement, built once (and its cache key).
_FETCH = select_providers().where(RP.c.uuid == sa.bindparam("b_uuid"))


def _ids(conn, uuid):
    """(id, parent id, root id) of ``uuid`` or None."""
    rows = conn.execute(
        sa.select(
            RP.c.id, RP.c.parent_provider_id, RP.c.root_provider_id, RP.c.uuid
        ).where(common.text_exactly(conn, RP.c.uuid, uuid))
    )
    return next((row for row in rows if row.uuid == uuid), None)  # common.exact


def get(db: db_api.Database, uuid: str) -> Mapping[str, Any]:
    """The provider; ResourceProviderNotFound (the lookup message) if none.
    From the catalog when ``held`` finds it there, after that one
    statement; otherwise by one SQL statement. The same mapping either way
    but for the times: the last change as updated_at, in whole seconds
    (what Last-Modified shows)."""
    with db.single_read() as conn:
        found = held(db, conn, uuid)
        row = _from_memory(found) if found is not None else _fetch(conn, uuid)
    if row is None:
        raise common.provider_not_found(uuid)
    return row


class Held(typing.NamedTuple):
    """A provider as the catalog holds it (``held``)."""

    catalog: store.Catalog
    rp: int
    generation: int
    seconds: int | None  # its last change, since the epoch
    stocked: int | None  # its inventories' last change, since the epoch


def held(db: db_api.Database, conn: sa.Connection, uuid: str) -> Held | None:
    """Provider ``uuid`` from the catalog current at the stamp ``conn``
    reads, when it holds the providers' generations and last changes (as
    the allocation reads: ``refresh.with_allocations``); None otherwise
    (the caller reads SQL); ResourceProviderNotFound (the lookup message)
    when the catalog has no such provider."""
    catalog = refresh.with_allocations(db, conn)
    if catalog is None:
        return None
    assert catalog.used is not None
    rp = catalog.ids.get(uuid)
    if rp is None:
        raise common.provider_not_found(uuid)
    found = catalog.used.last_change(rp)
    if found is None:
        return None
    return Held(catalog, rp, *found)


def _from_memory(found: Held) -> Mapping[str, Any]:
    """``get``'s mapping of a provider the catalog holds."""
    catalog, rp, generation, seconds, _ = found
    provider = catalog.providers[rp]
    uuids = catalog.uuids
    return {
        "id": rp,
        "uuid": uuids[rp],
        "name": catalog.names[rp],
        "generation": generation,
        "created_at": None,
        "updated_at": None if seconds is None else consumer_columns.time_of(seconds),
        "parent_provider_uuid": uuids.get(provider.parent_id),
        "root_provider_uuid": uuids[provider.root_id],
    }


# create()'s statements, built once (and their cache keys).
_PARENT = (
    sa.select(RP.c.id, RP.c.root_provider_id, ROOT.c.uuid.label("root_uuid"))
    .select_from(RP.outerjoin(ROOT, ROOT.c.id == RP.c.root_provider_id))
    .where(RP.c.uuid == sa.bindparam("b_uuid"))
)
_INSERT = RP.insert()


class _Parent(typing.NamedTuple):
    id: int
    root_provider_id: int
    root_uuid: str


def _parent(conn: sa.Connection, uuid: str) -> _Parent | None:
    """The would-be parent ``uuid``'s row (``_PARENT``), or None, read on
    the driver's cursor (``db_api.plain_rows``): every child's creation
    reads it. A value the database cannot hold goes through
    ``conn.execute``, whose error listeners answer for it."""
    if not db_api.holds_text(conn.dialect.name, uuid):
        row = conn.execute(_PARENT, {"b_uuid": uuid}).first()
    else:
        row = next(iter(db_api.plain_rows(conn, _PARENT, {"b_uuid": uuid})), None)
    return _Parent(*row) if row is not None else None


# A new root provider's root is itself (its id is known once inserted).
_ROOT_IS_SELF = (
    RP.update()
    .where(RP.c.id == sa.bindparam("b_id"))
    .values(root_provider_id=sa.bindparam("b_id"), updated_at=RP.c.updated_at)
)


# The longest provider name (the column, and the schema's maxLength).
NAME_LENGTH = 200
# Backends whose unique key on the name already counts names that differ
# only by trailing spaces as one (MySQL's utf8mb4_bin pads); elsewhere a
# new name is compared with its padded forms once inserted.
_PADDED_UNIQUE_NAMES = frozenset({"mysql"})


def _padded(name: str) -> dict[str, str]:
    """Bounds of the names that differ from ``name`` only by trailing
    spaces: one name to upstream's MySQL schema, so one name to placement
    on every backend (doc/api.md "Names and ids"). Each is a prefix of the
    next, so every collation orders them between ``name`` without its
    trailing spaces and the longest."""
    base = name.rstrip(" ")
    spaces = max(NAME_LENGTH, len(name)) - len(base)
    return {"b_base": base, "b_longest": base + " " * spaces}


# The provider's name is _padded's: the bounds let the unique index find
# the few rows between them.
_SAME_NAME = sa.and_(
    RP.c.name >= sa.bindparam("b_base"),
    RP.c.name <= sa.bindparam("b_longest"),
    sa.func.rtrim(RP.c.name) == sa.bindparam("b_base"),
)


def _clashes(conn, name, uuid):
    """The "column: value" parts of ``name``/``uuid`` already taken."""
    taken = conn.execute(
        sa.select(RP.c.name, RP.c.uuid).where(
            sa.or_(_SAME_NAME, RP.c.uuid == sa.bindparam("b_uuid"))
        ),
        dict(_padded(name), b_uuid=uuid),
    ).all()
    parts = []
    # A row the uuid did not find was found by its name, as the database's
    # collation compares (a case-insensitive one included).
    if any(
        row.uuid != uuid or row.name.rstrip(" ") == name.rstrip(" ") for row in taken
    ):
        parts.append("name: %s" % name)
    if any(row.uuid == uuid for row in taken):
        parts.append("uuid: %s" % uuid)
    return parts


@db_api.retry_on_deadlock
def create(
    db: db_api.Database, uuid: str, name: str, parent_uuid: str | None = None
) -> Any:
    """Create a root (or, with ``parent_uuid``, a child) provider.

    ObjectActionError for a missing name or a bad parent, DuplicateName when
    the name or uuid is taken.
    """
    if not name:
        raise exception.ObjectActionError("create", "name is required")
    # The parent is compared and looked up exactly as sent.
    if parent_uuid is not None and parent_uuid == uuid:
        raise exception.ObjectActionError("create", SAME_AS_PARENT)
    with db.writer() as conn:
        parent = None
        if parent_uuid is not None:
            parent = _parent(conn, parent_uuid)
            if parent is None:
                raise exception.ObjectActionError(
                    "create", provider_tree.NO_SUCH_PARENT
                )
        # The unique keys decide; a taken name or uuid is worded after.
        try:
            with db_api.may_conflict(conn):
                result = conn.execute(
                    _INSERT,
                    {
                        "uuid": uuid,
                        "name": name,
                        "generation": 0,
                        "parent_provider_id": parent.id if parent else None,
                        "root_provider_id": parent.root_provider_id if parent else None,
                    },
                )
        except sa_exc.IntegrityError:
            _check_unique(conn, name, uuid)
            raise
        key: Any = result.inserted_primary_key  # one row inserted
        new_id = key[0]
        if conn.dialect.name not in _PADDED_UNIQUE_NAMES:
            _check_name_free(conn, name, new_id, "name: ")
        changes.record(conn, changes.PROVIDER, [new_id])
        if parent is None:
            db_api.at_commit(conn, _ROOT_IS_SELF, {"b_id": new_id})
        row_leaves = (
            ("name", name),
            ("parent_provider_id", parent.id if parent else None),
            ("root_provider_id", parent.root_provider_id if parent else new_id),
        )
        outcome.provider(
            conn, new_id, outcome.Leaves(uuid, generation=0, columns=row_leaves)
        )
        inserted: Any = result.last_inserted_params()  # one row's values
        created_at = inserted["created_at"]
        if conn.dialect.name == "mysql":
            created_at = created_at.replace(microsecond=0)  # DATETIME(0)
        # Everything the row holds is known: no read back.
        return {
            "id": new_id,
            "uuid": uuid,
            "name": name,
            "generation": 0,
            "created_at": created_at,
            "updated_at": None,
            "parent_provider_uuid": parent_uuid,
            "root_provider_uuid": parent.root_uuid if parent else uuid,
        }


def _check_unique(conn, name, uuid):
    clashes = _clashes(conn, name, uuid)
    if clashes:
        raise exception.DuplicateName(
            "Conflicting resource provider %s already exists." % ", ".join(clashes)
        )


# Whether a provider other than b_id has the name (_padded).
_NAME_TAKEN = sa.select(sa.exists().where(_SAME_NAME, RP.c.id != sa.bindparam("b_id")))


# PostgreSQL: a transaction-scoped advisory lock per name without its
# trailing spaces (the first key says whose locks these are), so two
# writers of padded twins check one after the other; under READ
# COMMITTED each would otherwise miss the other's uncommitted row. No
# schema change: the reference service sharing the database is unaffected.
_NAME_LOCK_SPACE = 0x504C4E4D  # "PLNM"
_LOCK_NAME = sa.select(
    sa.func.pg_advisory_xact_lock(
        _NAME_LOCK_SPACE, sa.func.hashtext(sa.bindparam("b_base"))
    )
)


def _check_name_free(conn, name, provider_id, part=""):
    """DuplicateName if a provider other than ``provider_id`` has ``name``
    (_padded), worded as create (``part`` "name: ") or rename says it."""
    if conn.dialect.name == "postgresql":
        conn.execute(_LOCK_NAME, {"b_base": name.rstrip(" ")})
    if conn.scalar(_NAME_TAKEN, dict(_padded(name), b_id=provider_id)):
        raise exception.DuplicateName(
            "Conflicting resource provider %s%s already exists." % (part, name)
        )


@db_api.retry_on_deadlock
def update(
    db: db_api.Database,
    uuid: str,
    name: str,
    parent_uuid: Any = UNCHANGED,
    allow_reparenting: bool = False,
) -> sa.RowMapping:
    """Rename and (unless ``parent_uuid`` is UNCHANGED) move the provider.

    Moving rewrites the root of the provider's whole subtree. The generation
    is not touched. Returns the updated provider.
    """
    with db.writer() as conn:
        me = _ids(conn, uuid)
        if me is None:
            raise common.provider_not_found(uuid)
        values = {"name": name}
        if parent_uuid is not UNCHANGED:
            values.update(provider_tree.move(conn, me, parent_uuid, allow_reparenting))
        _check_name_free(conn, name, me.id)
        try:
            with db_api.may_conflict(conn):
                conn.execute(RP.update().where(RP.c.id == me.id).values(**values))
        except sa_exc.IntegrityError:
            _check_name_free(conn, name, me.id)
            raise
        changes.record(conn, changes.PROVIDER, [me.id])
        outcome.provider(
            conn, me.id, outcome.Leaves(uuid, columns=tuple(values.items()))
        )
        return _fetch(conn, uuid)


@db_api.retry_on_deadlock
def delete(db: db_api.Database, uuid: str) -> None:
    """Delete a leaf provider without allocations, with its inventories and
    trait and aggregate associations."""
    with db.writer() as conn:
        me = _ids(conn, uuid)
        if me is None:
            raise exception.ResourceProviderNotFound(
                "No resource provider with uuid %s found for delete" % uuid
            )
        if conn.scalar(sa.select(sa.exists().where(RP.c.parent_provider_id == me.id))):
            raise _cannot_delete_parent(uuid)
        for table in (
            tables.inventories,
            tables.resource_provider_traits,
            tables.resource_provider_aggregates,
        ):
            conn.execute(table.delete().where(table.c.resource_provider_id == me.id))
        # InnoDB refuses to delete a row whose FK points at itself.
        conn.execute(RP.update().where(RP.c.id == me.id).values(root_provider_id=None))
        # Conditional, so an allocation written since we looked still wins
        # (raising rolls the writes above back).
        allocated = sa.exists().where(
            tables.allocations.c.resource_provider_id == me.id
        )
        try:
            deleted = conn.execute(
                RP.delete().where(RP.c.id == me.id, ~allocated)
            ).rowcount
        except sa_exc.IntegrityError:
            # A child appeared since the check (its FK points at us).
            raise _cannot_delete_parent(uuid)
        if deleted != 1:
            raise exception.ResourceProviderInUse(
                "Unable to delete resource provider %s: Resource provider has "
                "allocations." % uuid
            )
        changes.record(conn, changes.PROVIDER, [me.id])
        outcome.provider(conn, me.id, outcome.Leaves(uuid, exists=False))


def _cannot_delete_parent(uuid):
    return exception.CannotDeleteParent(
        "Unable to delete parent resource provider %s: It has child resource "
        "providers." % uuid
    )
