"""Consumers and the projects, users and consumer types they refer to.

Consumer records only change as part of an allocation write (objects/
allocation.py); every function here takes the writer's open connection.
A consumer generation is guarded like a provider's: compare-and-swap, and a
lost swap is a ``ConsumerRace`` that the writer retries in a new transaction.
"""

import dataclasses
from collections.abc import Iterable
from typing import Any
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from placement import exception
from placement.db import api as db_api
from placement.db import tables

CONSUMERS = tables.consumers
ALLOC = tables.allocations
RP = tables.resource_providers
PROJECTS = tables.projects
USERS = tables.users
TYPES = tables.consumer_types


class ConsumerRace(exception.ConcurrentUpdate):
    """Another writer changed a consumer between our read and our write."""


@dataclasses.dataclass
class ConsumerWrite:
    """The complete new allocation set of one consumer, as a client sent it."""

    uuid: str
    project_id: str
    user_id: str
    # None leaves an existing consumer's type alone (writes below 1.38).
    consumer_type: str | None
    # The consumer_generation sent (checked only from 1.28).
    generation: int | None
    # {provider uuid: {resource class name: amount}}, in body order.
    allocations: dict


class Existing(NamedTuple):
    consumers: dict[str, sa.RowMapping]  # {uuid: consumer row} of those that exist
    held: dict[str, set[int]]  # {uuid: {provider ids}} of those holding allocations
    providers: dict[str, int]  # {uuid: id} of the named providers that exist


def existing_selects(*padding: Any) -> tuple[sa.Select, sa.Select]:
    """The rows of ``existing`` about consumers: kind 0 (the consumer row)
    and kind 1 (a provider it holds allocations on: one row per
    allocation, the readers keep a set; a DISTINCT made MariaDB build a
    temporary table for every claim), of the consumers bound as
    ``uuids``, each row followed by ``padding`` (a statement that adds
    rows of its own kinds to them)."""
    uuids: sa.BindParameter[Any] = sa.bindparam("uuids", expanding=True)
    return (
        sa.select(
            sa.literal_column("0", sa.Integer).label("kind"),
            CONSUMERS.c.id,
            CONSUMERS.c.uuid,
            CONSUMERS.c.generation,
            CONSUMERS.c.project_id,
            CONSUMERS.c.user_id,
            CONSUMERS.c.consumer_type_id,
            *padding,
        ).where(CONSUMERS.c.uuid.in_(uuids)),
        sa.select(
            sa.literal_column("1", sa.Integer),
            ALLOC.c.resource_provider_id,
            ALLOC.c.consumer_id,
            *[sa.cast(sa.null(), sa.Integer)] * 4,
            *padding,
        ).where(ALLOC.c.consumer_id.in_(uuids)),
    )


# The statement of ``existing``, built once: its cache key is computed
# once too, which building it per call would repeat on every write.
_EXISTING = sa.union_all(
    *existing_selects(),
    sa.select(
        sa.literal_column("2", sa.Integer),
        RP.c.id,
        RP.c.uuid,
        *[sa.cast(sa.null(), sa.Integer)] * 4,
    ).where(RP.c.uuid.in_(sa.bindparam("providers", expanding=True))),
)


def existing(
    conn: sa.Connection, uuids: Iterable[str], providers: Iterable[str] = ()
) -> Existing:
    """The consumers among ``uuids`` that exist, the providers of those
    among them holding allocations (with or without a consumer row), and
    the ids of the ``providers`` (uuids) that exist: one statement."""
    found: dict[str, sa.RowMapping] = {}
    held: dict[str, set[int]] = {}
    provider_ids: dict[str, int] = {}
    rows = conn.execute(
        _EXISTING, {"uuids": list(set(uuids)), "providers": list(set(providers))}
    ).mappings()
    for row in rows:
        if row["kind"] == 0:
            found[row["uuid"]] = row
        elif row["kind"] == 1:
            held.setdefault(row["uuid"], set()).add(row["id"])
        else:
            provider_ids[row["uuid"]] = row["id"]
    return Existing(found, held, provider_ids)


def check_generations(
    writes: Iterable[ConsumerWrite], found: dict[str, sa.RowMapping]
) -> None:
    """409 on the first consumer (body order) whose generation is not the
    one the client believes it has (null = "does not exist yet")."""
    for write in writes:
        row = found.get(write.uuid)
        stored = row["generation"] if row is not None else None
        if stored != write.generation:
            raise exception.ConcurrentUpdate(
                "consumer generation conflict - expected %s but got %s"
                % ("null" if row is None else stored, write.generation)
            )


def _id_of(table: sa.Table, column: str, value: Any) -> sa.ScalarSelect[Any]:
    """The id of the row of ``table`` whose ``column`` is ``value`` (a bind
    parameter or a value): NULL when there is none, which the consumer's
    NOT NULL column refuses (a project or user another writer took away
    since this process remembered it: ``db_api.known``)."""
    return sa.select(table.c.id).where(table.c[column] == value).scalar_subquery()


def _type_id_of(name: Any) -> sa.ColumnElement[Any]:
    """A consumer type's id by ``name``, or 0 when there is no such row:
    no type's id, which the column's foreign key refuses (the column
    itself takes NULL, for a consumer without a type)."""
    return sa.func.coalesce(_id_of(TYPES, "name", name), 0)


_TYPE = sa.bindparam("b_type", type_=sa.String)

# A new consumer naming its project, user and type by their external ids
# and name: no id read back, none remembered.
_INSERT_NAMED = CONSUMERS.insert().values(
    uuid=sa.bindparam("b_uuid"),
    generation=1,
    project_id=_id_of(PROJECTS, "external_id", sa.bindparam("b_project")),
    user_id=_id_of(USERS, "external_id", sa.bindparam("b_user")),
    consumer_type_id=sa.case((_TYPE.is_(None), sa.null()), else_=_type_id_of(_TYPE)),
)


def is_created_concurrently(error: sa_exc.IntegrityError) -> bool:
    """Whether ``error`` is a new consumer's uuid taken by another writer
    since it was read (a ``ConsumerRace``)."""
    text = str(error.orig)
    return "uniq_consumers0uuid" in text or "consumers.uuid" in text


def save(
    conn: sa.Connection,
    writes: list[ConsumerWrite],
    found: dict[str, sa.RowMapping],
    at_commit: bool = False,
) -> db_api.Learned:
    """Create, update or delete the consumer record of every write;
    returns the projects, users and types created (``db_api.remember``
    them after commit). The consumer rows take their ids by name, so
    none is read back, and one another writer took away since it was
    remembered fails the statement (``_id_of``) rather than be written.
    ``at_commit``: a write that only creates consumers sends it all with
    the COMMIT (``db_api.at_commit``), where that saves round trips
    (``db_api.holds_for_commit``).

    Consumers keeping allocations get generation + 1 (new ones start at 0,
    so they read back 1) and the sent project/user/type; consumers left
    without allocations are deleted; a write emptying a consumer that does
    not exist leaves nothing behind. A new consumer's uuid taken meanwhile
    fails the write (``is_created_concurrently``), at the latest at commit.
    """
    new = [w for w in writes if w.uuid not in found and w.allocations]
    kept = [w for w in writes if w.uuid in found and w.allocations]
    emptied = [found[w.uuid] for w in writes if w.uuid in found and not w.allocations]
    held = at_commit and not kept and not emptied and db_api.holds_for_commit(conn)
    learned = _ensure_named(conn, writes, held)
    if new:
        db_api.plain_insert(
            conn,
            _INSERT_NAMED,
            [
                {
                    "b_uuid": w.uuid,
                    "b_project": w.project_id,
                    "b_user": w.user_id,
                    "b_type": w.consumer_type,
                }
                for w in new
            ],
            at_commit=held,
        )
    # One UPDATE per distinct (project, user, type): usually a single one.
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for write in kept:
        key = (write.project_id, write.user_id, write.consumer_type)
        groups.setdefault(key, []).append(found[write.uuid])
    for (project, user, consumer_type), rows in groups.items():
        values = {
            "generation": CONSUMERS.c.generation + 1,
            "project_id": _id_of(PROJECTS, "external_id", project),
            "user_id": _id_of(USERS, "external_id", user),
        }
        if consumer_type:
            values["consumer_type_id"] = _type_id_of(consumer_type)
        _swap(conn, CONSUMERS.update().values(**values), rows)
    if emptied:
        _swap(conn, CONSUMERS.delete(), emptied)
    return learned


def _ensure_named(
    conn: sa.Connection, writes: list[ConsumerWrite], held: bool
) -> db_api.Learned:
    """Create the projects, users and types ``writes`` name that are not
    known to exist (at once, or ``held`` for the COMMIT: on the driver's
    cursor, ``db_api.plain_insert``, a new claim's two statements without
    SQLAlchemy's execution; nothing can fail before the COMMIT). Returns
    the names, to remember (once committed) as existing, their ids not
    known: the consumer statements take the ids by name."""
    learned: db_api.Learned = []
    for table, column, names in (
        (PROJECTS, "external_id", [w.project_id for w in writes if w.allocations]),
        (USERS, "external_id", [w.user_id for w in writes if w.allocations]),
        (TYPES, "name", [w.consumer_type for w in writes if w.consumer_type]),
    ):
        # Looked up name by name: a set difference with the memory's
        # keys would copy them all (up to remembered.KNOWN_MAX), per claim.
        known = db_api.known(conn, table)
        missing = {name for name in names if name not in known}
        if missing:
            insert = db_api.insert_ignore(conn.dialect.name, table)
            rows = [{column: n} for n in sorted(missing)]
            if held:
                db_api.plain_insert(conn, insert, rows, at_commit=True)
            else:
                conn.execute(insert, rows)
            learned.append((table, dict.fromkeys(missing)))
    return learned


def _swap(conn, statement, rows):
    """Apply ``statement`` to ``rows`` only where the generation is still the
    one we read; ConsumerRace when any has moved."""
    seen = {row["id"]: row["generation"] for row in rows}
    result = conn.execute(
        statement.where(
            CONSUMERS.c.id.in_(seen),
            CONSUMERS.c.generation == sa.case(seen, value=CONSUMERS.c.id),
        )
    )
    if result.rowcount != len(seen):
        raise ConsumerRace("consumer generation changed concurrently")


def delete_records(conn: sa.Connection, uuids: Iterable[str]) -> None:
    """Remove consumer records (their allocations are already gone)."""
    conn.execute(CONSUMERS.delete().where(CONSUMERS.c.uuid.in_(set(uuids))))
