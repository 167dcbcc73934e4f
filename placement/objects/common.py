"""Lookups and the generation compare-and-swap that every domain shares.

Functions here take an open connection (``conn``) so callers compose them
inside their own transaction.
"""

import functools
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from placement import exception
from placement.db import api as db_api
from placement.db import tables

RP = tables.resource_providers
RC = tables.resource_classes
TRAIT = tables.traits

# Upstream's message for a client-supplied provider generation that is
# not the current one (409 placement.concurrent_update).
GENERATION_CHANGED = (
    "Resource provider's generation already changed. "
    "Please update the generation and try again."
)

PROVIDER_COLUMNS = (
    RP.c.id,
    RP.c.uuid,
    RP.c.name,
    RP.c.generation,
    RP.c.root_provider_id,
    RP.c.parent_provider_id,
    RP.c.created_at,
    RP.c.updated_at,
)


def text_exactly(
    db: db_api.Database | sa.Connection,
    column: sa.ColumnElement[Any],
    value: str,
) -> sa.ColumnElement[bool]:
    """``column == value`` byte for byte on every backend (doc/api.md
    "Names and ids"). MySQL's utf8mb4_bin compares with PAD SPACE, where
    'a' equals 'a ': there the bytes are compared too (after the plain
    comparison, which the index serves). ``db``: the database or an open
    connection to it."""
    dialect = db.dialect if isinstance(db, db_api.Database) else db.dialect.name
    if not db_api.holds_text(dialect, value):
        return sa.false()
    clause: sa.ColumnElement[bool] = column == value
    if dialect == "mysql":
        exact = value.encode("utf-8", "surrogatepass")
        clause = sa.and_(clause, sa.cast(column, sa.LargeBinary) == exact)
    return clause


def exact(rows: Iterable[Any], key: str, value: Any) -> list[Any]:
    """The ``rows`` whose ``key`` is ``value`` exactly: what a lookup by a
    path value (a uuid or a name) found, less what the collation took for
    it (MySQL's PAD SPACE takes 'a ' for 'a', a case-insensitive one 'A'
    for 'a'). Every lookup of a path value passes its rows through here
    (doc/api.md "Names and ids")."""
    return [row for row in rows if row[key] == value]


def holdable(conn: sa.Connection, values: Iterable[str]) -> list[str]:
    """The ``values`` the database can hold (``db_api.holds_text``), the
    ones worth looking up."""
    return [value for value in values if db_api.holds_text(conn.dialect.name, value)]


def _by_uuid(conn, statement, uuid, key, params=None):
    """exact rows of ``statement`` for the provider ``uuid`` (b_uuid; the
    statement's other parameters ``params``)."""
    if not holdable(conn, [uuid]):
        return []
    rows = conn.execute(statement, {**(params or {}), "b_uuid": uuid})
    return exact(rows.mappings(), key, uuid)


def exact_in(rows: Iterable[Any], values: Iterable[Any], key: Any = 0) -> list[Any]:
    """``exact`` for a lookup of several ``values`` (``IN``)."""
    wanted = set(values)
    return [row for row in rows if row[key] in wanted]


def get_provider(conn: sa.Connection, uuid: str) -> sa.RowMapping:
    """The provider row for ``uuid``; ResourceProviderNotFound if none."""
    row = next(iter(_by_uuid(conn, _PROVIDER, uuid, "uuid")), None)
    if row is None:
        raise provider_not_found(uuid)
    return row


# get_provider's statement, built once (and its cache key).
_PROVIDER = sa.select(*PROVIDER_COLUMNS).where(RP.c.uuid == sa.bindparam("b_uuid"))


def provider_rows_statement(
    columns: Iterable[Any], joined: Any, on: Any
) -> sa.Select[Any]:
    """A statement, to be built once, reading a provider's generation
    (``rp_generation``) and its rows of ``joined`` (``columns``) in one
    round trip: the provider left-joined to them ``on``, for the uuid
    bound as ``b_uuid`` (``provider_rows`` runs it)."""
    return (
        sa.select(
            RP.c.uuid.label("rp_uuid"), RP.c.generation.label("rp_generation"), *columns
        )
        .select_from(RP.outerjoin(joined, on))
        .where(RP.c.uuid == sa.bindparam("b_uuid"))
    )


def provider_rows(
    conn: sa.Connection,
    statement: sa.Select[Any],
    uuid: str,
    key: str,
    params: dict[str, Any] | None = None,
) -> tuple[int, list[sa.RowMapping]]:
    """(provider generation, its rows) read by ``statement`` (made by
    ``provider_rows_statement``; its other parameters ``params``), a
    provider without rows giving one row whose ``key`` is NULL;
    ResourceProviderNotFound if there is no provider."""
    rows = _by_uuid(conn, statement, uuid, "rp_uuid", params)
    if not rows:
        raise provider_not_found(uuid)
    return rows[0]["rp_generation"], [row for row in rows if row[key] is not None]


def get_provider_with(
    conn: sa.Connection, uuid: str, column: sa.Column[Any], lock: bool = False
) -> tuple[dict[str, Any], set[Any]]:
    """(provider's {"id", "uuid", "generation"}, {values of ``column``})
    for ``uuid``, where ``column`` belongs to a table of per-provider rows
    (inventories, aggregate or trait links), in one statement;
    ResourceProviderNotFound if there is no provider. ``lock``: the
    provider's row (and its rows read with it) is held until the
    transaction ends, as a generation swap would hold it (``bump_held``);
    a SQLite writer holds the whole database already. Read on the
    driver's cursor (``db_api.plain_rows``): every write of a provider's
    inventories, traits or aggregates reads it."""
    rows = []
    if holdable(conn, [uuid]):
        statement = _provider_with(column, lock)
        rows = exact_in(db_api.plain_rows(conn, statement, {"b_uuid": uuid}), [uuid], 1)
    if not rows:
        raise provider_not_found(uuid)
    provider_id, _, generation, _ = rows[0]
    values = {row[3] for row in rows if row[3] is not None}
    return {"id": provider_id, "uuid": uuid, "generation": generation}, values


@functools.cache
def _provider_with(column: sa.Column[Any], lock: bool) -> sa.Select[Any]:
    """get_provider_with's statement, built once: the provider's id, uuid,
    generation and ``column``."""
    query = (
        sa.select(RP.c.id, RP.c.uuid, RP.c.generation, column)
        .select_from(
            RP.outerjoin(column.table, column.table.c.resource_provider_id == RP.c.id)
        )
        .where(RP.c.uuid == sa.bindparam("b_uuid"))
    )
    return query.with_for_update(of=RP) if lock else query


def provider_not_found(uuid: str) -> exception.ResourceProviderNotFound:
    return exception.ResourceProviderNotFound(
        "No resource provider with uuid %s found" % uuid
    )


# Built once (see ``swap_count``), for writes of up to SWAP_BUILT_ONCE
# providers (a claim touches a few).
SWAP_BUILT_ONCE = 100
_SWAP = (
    RP.update()
    .where(
        RP.c.id.in_(db_api.int_list("ids")),
        sa.tuple_(RP.c.id, RP.c.generation).in_(
            sa.bindparam("seen", expanding=True, literal_execute=True)
        ),
    )
    .values(generation=RP.c.generation + 1, updated_at=RP.c.updated_at)
)


def swap_count(conn: sa.Connection, seen: dict[int, int]) -> int:
    """Compare-and-swap the generation of every provider in ``seen``
    ({id: generation read}) to generation + 1, in one statement; returns
    how many it swapped (fewer than ``seen``: another writer moved the
    others first).

    ``updated_at`` is left alone: a generation bump is not an edit of the
    provider itself. The statement is built once, and run on the
    driver's cursor, its integers written in (``db_api.plain_count``: the
    catalog does not keep generations): every claim sends it.
    """
    if len(seen) <= SWAP_BUILT_ONCE:
        params = {"ids": list(seen), "seen": list(seen.items())}
        return db_api.plain_count(conn, _SWAP, params)
    # Many providers: PostgreSQL parses a long row-value IN list as a chain
    # too deep for its stack ("stack depth limit exceeded"); a CASE is flat.
    return conn.execute(
        RP.update()
        .where(RP.c.id.in_(seen), RP.c.generation == sa.case(seen, value=RP.c.id))
        .values(generation=RP.c.generation + 1, updated_at=RP.c.updated_at)
    ).rowcount


# The message of a generation swap held for the COMMIT that lost
# (``swap_at_commit``), ": none" (lost for every provider) or ": some"
# after it.
SWAP_LOST = "placement: provider generation swap lost"


def swap_at_commit(conn: sa.Connection, seen: dict[int, int]) -> bool:
    """``swap_count``'s swap held for the COMMIT of a write whose last
    statements are held (``db_api.plain_count_at_commit``: on MariaDB),
    checked there: one that lost for any provider stops the query before
    the statements after it and the COMMIT (``lost_swap`` tells the
    error), nothing written. A round trip less than ``swap_count``
    followed by the held statements. False (nothing done) elsewhere or
    for many providers."""
    if len(seen) > SWAP_BUILT_ONCE:
        return False
    params = {"ids": list(seen), "seen": list(seen.items())}
    return db_api.plain_count_at_commit(conn, _SWAP, params, len(seen), SWAP_LOST)


def lost_swap(error: BaseException) -> str | None:
    """Of a write's error: "none" when its swap held for the COMMIT
    (``swap_at_commit``) lost for every provider, "some" when for some of
    them; None for any other error."""
    if not db_api.is_count_check(error):
        return None
    text = str(getattr(error, "orig", error))
    if SWAP_LOST + ": none" in text:
        return "none"
    if SWAP_LOST + ": some" in text:
        return "some"
    return None


def swap_generations(
    conn: sa.Connection,
    seen: dict[int, int],
    conflict: exception.PlacementException | None = None,
) -> None:
    """``swap_count`` raising ``conflict`` (an exception instance, default
    ConcurrentUpdate) when another writer moved any of them first."""
    if swap_count(conn, seen) != len(seen):
        raise conflict or exception.ConcurrentUpdate(
            "resource provider generation conflict"
        )


# swap_generations for one provider, built once: its statement is
# rebuilt (and its cache key worked out) on every call otherwise.
_SWAP_ONE = (
    RP.update()
    .where(RP.c.id == sa.bindparam("b_id"), RP.c.generation == sa.bindparam("b_seen"))
    .values(generation=RP.c.generation + 1, updated_at=RP.c.updated_at)
)


def bump_generation(
    conn: sa.Connection,
    provider_id: int,
    seen_generation: int,
    message: str | None = None,
) -> int:
    """One provider's compare-and-swap (as swap_generations); returns the
    new generation."""
    result = conn.execute(_SWAP_ONE, {"b_id": provider_id, "b_seen": seen_generation})
    if result.rowcount != 1:
        raise exception.ConcurrentUpdate(
            message or "resource provider generation conflict"
        )
    return seen_generation + 1


_BUMP_HELD = (
    RP.update()
    .where(RP.c.id == sa.bindparam("b_id"))
    .values(generation=RP.c.generation + 1, updated_at=RP.c.updated_at)
)


def bump_held(conn: sa.Connection, provider: Mapping[str, Any]) -> int:
    """Move the generation of ``provider``, read with ``lock`` in this
    transaction: no other writer can have moved it since (it waits for the
    row, then finds the generation moved), so the move is only written,
    with the COMMIT (``db_api.at_commit``). Returns the new generation.
    On Galera a writer on another node moves it too: one of the two fails
    its commit as a deadlock, and retries."""
    db_api.at_commit(conn, _BUMP_HELD, {"b_id": provider["id"]})
    return provider["generation"] + 1


CUSTOM_CLASS_ID_START = 10000


def _remembered(conn, table, names):
    """(memory of ``table``, {name: value} it holds of ``names``, the
    names it doesn't)."""
    cache = db_api.known(conn, table)
    found = {name: cache[name] for name in names if cache.get(name) is not None}
    return cache, found, set(names) - set(found)


def resource_class_ids(
    conn: sa.Connection, names: Iterable[str], cached: bool = False
) -> dict[str, int]:
    """{name: id} for ``names``; ResourceClassNotFound for the first unknown.
    ``cached``: standard classes already looked up are not looked up again."""
    names = list(names)
    if not names:
        return {}
    cache, found, missing = (
        _remembered(conn, RC, names) if cached else ({}, {}, set(names))
    )
    missing = set(holdable(conn, missing))
    if missing:
        rows = exact_in(
            conn.execute(
                sa.select(RC.c.name, RC.c.id).where(RC.c.name.in_(missing))
            ).all(),
            missing,
        )
        found.update(rows)
        cache.update(
            (name, rc_id) for name, rc_id in rows if rc_id < CUSTOM_CLASS_ID_START
        )
    for name in names:
        if name not in found:
            raise exception.ResourceClassNotFound("No such resource class %s." % name)
    return found


def trait_rows(conn: sa.Connection, names: Iterable[str]) -> dict[str, sa.RowMapping]:
    """{name: row (id, name, created_at, updated_at)} for ``names``;
    TraitNotFound naming every unknown one. Standard traits already looked
    up are not looked up again."""
    names = set(names)
    if not names:
        return {}
    cache, found, missing = _remembered(conn, TRAIT, names)
    missing = set(holdable(conn, missing))
    if missing:
        rows = (
            conn.execute(
                sa.select(
                    TRAIT.c.id, TRAIT.c.name, TRAIT.c.created_at, TRAIT.c.updated_at
                ).where(TRAIT.c.name.in_(missing))
            )
            .mappings()
            .all()
        )
        for row in exact_in(rows, missing, "name"):
            found[row["name"]] = row
            if not row["name"].startswith("CUSTOM_"):
                cache[row["name"]] = row
    if len(found) != len(names):
        raise exception.TraitNotFound(names - set(found))
    return found


def trait_ids(conn: sa.Connection, names: Iterable[str]) -> dict[str, int]:
    """{name: id} for ``names``; TraitNotFound naming every unknown one.
    Standard traits already looked up are not looked up again."""
    return {name: row["id"] for name, row in trait_rows(conn, names).items()}


def ensure_ids(
    conn: sa.Connection, table: sa.Table, column: str, names: Iterable[Any]
) -> tuple[dict[Any, int], db_api.Learned]:
    """({name: id} of the rows of ``table`` whose ``column`` is in
    ``names``, what was learned), inserting the missing rows first
    (projects, users, consumer types, aggregates: rows that exist as soon
    as something refers to them).

    The insert skips existing names (the connection's dialect tells how),
    so concurrent writers creating the same name do not fail; the select
    then reads whichever row won. Ids already remembered are not looked up;
    those looked up or created are what was learned, for ``remember``
    after commit.
    """
    names = set(names)
    if not names:
        return {}, []
    cache, found, missing = _remembered(conn, table, names)
    if not missing:
        return found, []
    insert = db_api.insert_ignore(conn.dialect.name, table)
    new = {}
    if len(missing) == 1:
        # One new name: its id comes back with the INSERT.
        name = next(iter(missing))
        new_id = db_api.inserted_id(conn.execute(insert, {column: name}))
        if new_id is not None:
            new[name] = new_id
    else:
        conn.execute(insert, [{column: n} for n in missing])
    if len(new) != len(missing):
        new.update(
            conn.execute(
                sa.select(table.c[column], table.c.id).where(
                    table.c[column].in_(missing - set(new))
                )
            ).all()
        )
    found.update(new)
    return found, [(table, new)]
