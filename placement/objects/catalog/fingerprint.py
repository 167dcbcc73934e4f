"""A fingerprint of what the catalog holds, which the database computes in
one statement and a catalog computes from its own maps: when the two
differ at the same stamp, somebody wrote the catalog's tables without
counting the write in ``catalog_changes`` (the reference service on the
same database, an operator's SQL, a restore from a backup). See "Writes by
other writers" in doc/architecture.md.

Per table, the number of rows and the sum of a hash of each row's kept
columns (each column times its own multiplier, the sum modulo a prime:
one reduction per row keeps the statement cheap, and no sum overflows a
64-bit integer on any database). Sums compare for equality: a restore
that takes rows away or moves values back changes them as surely as an
insert. Names and uuids enter as a 32-bit hash of their UTF-8 bytes, the
cheapest one each database has: CRC32 on MySQL (SQLite through a
function this module registers), the first 32 bits of the MD5 on
PostgreSQL.
"""

import hashlib
import zlib
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from placement.db import tables

# The hash of a row: (sum of column i times MULTIPLIERS[i]) mod PRIME.
# Values stay below 2**32 and multipliers below 2**23, so a row's sum of
# at most 8 terms stays below 2**58.
PRIME = 2147483647
MULTIPLIERS = (1000003, 1500007, 2000003, 2500009, 3000017, 3500017, 4000037, 4500007)
# allocation_ratio in thousandths, as an integer both sides round alike.
RATIO_SCALE = 1000
# The tables, in the order of the fingerprint's (count, sum) pairs.
PROVIDERS, INVENTORIES, TRAIT_LINKS, AGGREGATE_LINKS, CLASSES, TRAITS = range(6)
SIZE = 12

RP, INV = tables.resource_providers, tables.inventories
RPT, RPA = tables.resource_provider_traits, tables.resource_provider_aggregates
RC, T = tables.resource_classes, tables.traits
_CRC32_FUNCTION = "placement_crc32"
NameHash = Callable[[str | None], int]


def _crc32(name: str | None) -> int:
    return 0 if name is None else zlib.crc32(name.encode("utf-8"))


def _md5_32(name: str | None) -> int:
    if name is None:
        return 0
    return int(hashlib.md5(name.encode("utf-8")).hexdigest()[:8], 16)


def name_hash(dialect: str) -> NameHash:
    """The hash of names and uuids the database of ``dialect`` computes."""
    return _md5_32 if dialect == "postgresql" else _crc32


def row_hash(*values: int) -> int:
    return sum(m * v for m, v in zip(MULTIPLIERS, values)) % PRIME


def ratio(value: float) -> int:
    return round(value * RATIO_SCALE)


def empty() -> list[int]:
    return [0] * SIZE


def add(into: list[int], table: int, h: int, sign: int = 1) -> None:
    """Count one row of ``table`` with hash ``h`` in (sign 1) or out (-1)."""
    into[2 * table] += sign
    into[2 * table + 1] += sign * h


def add_provider(into: list[int], state: Any, hashed: NameHash, sign: int = 1) -> None:
    """Provider ``state`` (rows.State) with its inventories, traits and
    aggregates, counted in or out; ``hashed``: ``name_hash``'s."""
    provider = state.provider
    if provider is None:
        return
    rp = provider.id
    add(
        into,
        PROVIDERS,
        row_hash(
            rp,
            provider.parent_id or 0,
            provider.root_id or 0,
            hashed(state.uuid),
            hashed(state.name),
        ),
        sign,
    )
    for rc, inv in state.inventories.items():
        add(
            into,
            INVENTORIES,
            row_hash(
                rp,
                rc,
                inv.total,
                inv.reserved,
                inv.min_unit,
                inv.max_unit,
                inv.step_size,
                ratio(inv.allocation_ratio),
            ),
            sign,
        )
    for trait in state.traits:
        add(into, TRAIT_LINKS, row_hash(rp, trait), sign)
    for aggregate in state.aggregates:
        add(into, AGGREGATE_LINKS, row_hash(rp, aggregate), sign)


def names_part(into: list[int], table: int, names: dict, hashed: NameHash) -> None:
    """Set ``table``'s pair from {id: name} (classes or traits)."""
    into[2 * table] = len(names)
    into[2 * table + 1] = sum(row_hash(i, hashed(n)) for i, n in names.items())


def _sql_hash(columns: list[Any]) -> Any:
    return sum(m * c for m, c in zip(MULTIPLIERS, columns)) % PRIME


def _sql_name_hash(dialect: str, column: Any) -> Any:
    if dialect == "postgresql":
        hexadecimal = sa.func.concat("x", sa.func.left(sa.func.md5(column), 8))
        return sa.cast(sa.cast(hexadecimal, postgresql.BIT(32)), sa.BigInteger)
    if dialect == "mysql":
        return sa.func.crc32(column)
    return getattr(sa.func, _CRC32_FUNCTION)(column)


# The table of each part of the fingerprint, in its order.
TABLE_NAMES = (
    RP.name,
    INV.name,
    RPT.name,
    RPA.name,
    RC.name,
    T.name,
)


def _statement(dialect: str, only: frozenset | None = None) -> Any:
    def named(column):
        return sa.func.coalesce(_sql_name_hash(dialect, column), 0)

    def _int(column):
        # PostgreSQL multiplies integers in 32 bits (an error past them);
        # MySQL and SQLite in 64.
        if dialect == "postgresql":
            return sa.cast(column, sa.BigInteger)
        return column

    parts = [
        (
            PROVIDERS,
            RP,
            [
                _int(RP.c.id),
                _int(sa.func.coalesce(RP.c.parent_provider_id, 0)),
                _int(sa.func.coalesce(RP.c.root_provider_id, 0)),
                named(RP.c.uuid),
                named(RP.c.name),
            ],
        ),
        (
            INVENTORIES,
            INV,
            [
                _int(INV.c.resource_provider_id),
                _int(INV.c.resource_class_id),
                _int(INV.c.total),
                _int(INV.c.reserved),
                _int(INV.c.min_unit),
                _int(INV.c.max_unit),
                _int(INV.c.step_size),
                sa.cast(
                    sa.func.round(INV.c.allocation_ratio * RATIO_SCALE), sa.BigInteger
                ),
            ],
        ),
        (TRAIT_LINKS, RPT, [_int(RPT.c.resource_provider_id), _int(RPT.c.trait_id)]),
        (
            AGGREGATE_LINKS,
            RPA,
            [_int(RPA.c.resource_provider_id), _int(RPA.c.aggregate_id)],
        ),
        (CLASSES, RC, [_int(RC.c.id), named(RC.c.name)]),
        (TRAITS, T, [_int(T.c.id), named(T.c.name)]),
    ]
    selects = [
        sa.select(
            sa.literal(table, sa.Integer),
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(_sql_hash(columns)), 0),
        ).select_from(source)
        for table, source, columns in parts
        if only is None or TABLE_NAMES[table] in only
    ]
    return selects[0] if len(selects) == 1 else sa.union_all(*selects)


_STATEMENTS: dict[tuple, Any] = {}


def of_database(
    conn: sa.Connection, only: frozenset | None = None, before: list | None = None
) -> list[int]:
    """The fingerprint of what ``conn``'s transaction reads: one statement
    that reads every row of the catalog's tables (no other work per row
    than the hash); with ``only`` (table names, not empty), only theirs,
    the other tables' parts taken from ``before``."""
    dialect = conn.dialect.name
    statement = _STATEMENTS.get((dialect, only))
    if statement is None:
        statement = _STATEMENTS[dialect, only] = _statement(dialect, only)
    if dialect == "sqlite":
        dbapi_conn: Any = conn.connection.dbapi_connection
        dbapi_conn.create_function(_CRC32_FUNCTION, 1, _crc32, deterministic=True)
    found = list(before) if only is not None and before else empty()
    for table, count, total in conn.execute(statement):
        found[2 * table], found[2 * table + 1] = int(count), int(total)
    return found
