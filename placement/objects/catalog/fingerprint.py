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
import math
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from placement.db import tables
from placement.objects.catalog import rows

# The hash of a row: (sum of column i times MULTIPLIERS[i]) mod PRIME.
# Values stay below 2**32 and multipliers below 2**23, so a row's sum of
# at most 8 terms stays below 2**58.
PRIME = 2147483647
MULTIPLIERS = (1000003, 1500007, 2000003, 2500009, 3000017, 3500017, 4000037, 4500007)
# allocation_ratio in thousandths, floor(ratio * 1000 + 0.5) in IEEE doubles
# on both sides (the same operations give the same double everywhere), then
# bounded (``ratio``): any double the column holds, up to 3.4e38 through
# the API, and more by another writer on PostgreSQL or SQLite.
RATIO_SCALE = 1000
# Ratios strictly between -RATIO_SMALL and RATIO_SMALL: thousandths within
# +-2**38, made positive by adding RATIO_LIFT (a multiple of PRIME above
# 2**38); the row's sum stays below 2**62. Others are clamped to
# +-RATIO_CLAMP (2**128, past float32's range) and reduced modulo PRIME by
# their base-2**31 digits (2**31 is 1 modulo PRIME, so a number is its
# digits' sum modulo PRIME), each found exactly in doubles by FLOOR and
# scaling by powers of 2: thousandths of 2**128 take 5 digits, and the
# floor past them (0 or -1) stands for the sixth.
RATIO_SMALL = 2.0**38 / RATIO_SCALE
RATIO_LIFT = 129 * 2147483647
RATIO_CLAMP = 2.0**128
RATIO_DIGITS = 5
_FLOAT32_MAX = 3.4028234663852886e38
# The tables, in the order of the fingerprint's (count, sum) pairs.
PROVIDERS, INVENTORIES, TRAIT_LINKS, AGGREGATE_LINKS, CLASSES, TRAITS = range(6)
SIZE = 12

RP, INV = tables.resource_providers, tables.inventories
RPT, RPA = tables.resource_provider_traits, tables.resource_provider_aggregates
RC, T = tables.resource_classes, tables.traits
_CRC32_FUNCTION = "placement_crc32"
_RATIO_FUNCTION = "placement_ratio"
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


def ratio(value: float, dialect: str = "") -> int:
    """The ratio's term of an inventory's hash, as the database of
    ``dialect`` computes it (``_sql_ratio``), modulo PRIME. MySQL's FLOAT
    column holds a float32 and computes with it, but answers the value in
    6 digits: the float32 is that value's nearest (exactly so for the
    ratios this service writes, ``inventory.stored_ratio``)."""
    if value != value:
        value = RATIO_CLAMP  # NaN: the databases order it above all
    elif dialect == "mysql" and -_FLOAT32_MAX <= value <= _FLOAT32_MAX:
        value = struct.unpack("f", struct.pack("f", value))[0]
    value = min(max(value, -RATIO_CLAMP), RATIO_CLAMP)
    return math.floor(value * RATIO_SCALE + 0.5) % PRIME


def ratio_of(dialect: str) -> Callable[[float], int]:
    """``ratio`` for the database of ``dialect``, remembered per value: a
    cloud has few distinct ratios, and a catalog of 300,000 inventories
    asks for each one's."""
    return _TERMS["mysql" if dialect == "mysql" else ""]


class _Terms(dict):
    """{ratio: its term} for one dialect; called for a ratio's term."""

    def __init__(self, dialect: str) -> None:
        super().__init__()
        self.dialect = dialect

    def __call__(self, value: float) -> int:
        term = self.get(value)
        if term is None:
            if len(self) >= 4096:
                self.clear()
            term = self[value] = ratio(value, self.dialect)
        return term


_TERMS = {dialect: _Terms(dialect) for dialect in ("", "mysql")}


def empty() -> list[int]:
    return [0] * SIZE


def add(into: list[int], table: int, h: int, sign: int = 1) -> None:
    """Count one row of ``table`` with hash ``h`` in (sign 1) or out (-1)."""
    into[2 * table] += sign
    into[2 * table + 1] += sign * h


def add_provider(
    into: list[int],
    state: Any,
    hashed: NameHash,
    sign: int = 1,
    ratio_term: Callable[[float], int] = ratio,
) -> None:
    """Provider ``state`` (rows.State) with its inventories, traits and
    aggregates, counted in or out; ``hashed``: ``name_hash``'s,
    ``ratio_term``: ``ratio_of``'s."""
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
                ratio_term(inv.allocation_ratio),
            ),
            sign,
        )
    for trait in state.traits:
        add(into, TRAIT_LINKS, row_hash(rp, trait), sign)
    for aggregate in state.aggregates:
        add(into, AGGREGATE_LINKS, row_hash(rp, aggregate), sign)


def of_joined(
    joined: rows.Joined, hashed: NameHash, ratio_term: Callable[[float], int]
) -> list[int]:
    """``add_provider`` of every provider a whole read found, summed over
    the columns it was read from at once (``rows.Joined``): at 100,000
    hosts 0.85 s of CPU provider by provider. Rows of a provider that is
    not there are left out, as the catalog leaves them."""
    into = empty()
    rp, parent, root, nameless, uuids, names = joined.providers
    uuid_hashes = np.fromiter(map(hashed, uuids), dtype=np.int64, count=len(uuids))
    name_hashes = np.fromiter(
        (0 if null else hashed(name) for null, name in zip(nameless.tolist(), names)),
        dtype=np.int64,
        count=len(names),
    )
    _summed(into, PROVIDERS, (rp, parent, root, uuid_hashes, name_hashes))
    holder, *numbers, ratio = joined.inventories
    ratios, at = np.unique(ratio, return_inverse=True)
    terms = np.array([ratio_term(r) for r in ratios.tolist()], dtype=np.int64)
    kept = np.isin(holder, rp)
    _summed(
        into,
        INVENTORIES,
        [column[kept] for column in (holder, *numbers, terms[at.reshape(-1)])],
    )
    for table, (holder, value) in (
        (TRAIT_LINKS, joined.traits),
        (AGGREGATE_LINKS, joined.aggregates),
    ):
        kept = np.isin(holder, rp)
        _summed(into, table, (holder[kept], value[kept]))
    return into


def _summed(into: list[int], table: int, columns: Any) -> None:
    """``add`` of every row of ``columns`` (int64 arrays, a row's values
    across them), their ``row_hash`` computed at once: below 2**58 a
    row, as in ``row_hash``, and numpy's remainder has the divisor's
    sign, as Python's."""
    hashes = np.zeros(len(columns[0]), dtype=np.int64)
    for multiplier, column in zip(MULTIPLIERS, columns):
        hashes += multiplier * column.astype(np.int64)
    into[2 * table] += len(hashes)
    into[2 * table + 1] += int((hashes % PRIME).sum())


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


def _sql_ratio(dialect: str, column: Any) -> Any:
    """``ratio``'s term in SQL, a BIGINT congruent to it modulo PRIME
    (non-negative: the row's sum is reduced by SQL's MOD, which keeps a
    negative sign). SQLite, which may lack FLOOR: CAST truncates, the
    floor of a positive number; ``ratio`` itself, registered as a
    function, for the others."""

    def double(value):
        return sa.literal(value, sa.Float)

    def bigint(value):
        return sa.cast(value, sa.BigInteger)

    if dialect == "sqlite":
        return sa.case(
            (
                sa.and_(column >= double(0.0), column < double(RATIO_SMALL)),
                bigint(column * double(float(RATIO_SCALE)) + double(0.5))
                + sa.literal(RATIO_LIFT, sa.BigInteger),
            ),
            else_=getattr(sa.func, _RATIO_FUNCTION)(column),
        )
    small = bigint(
        sa.func.floor(column * double(float(RATIO_SCALE)) + double(0.5))
    ) + sa.literal(RATIO_LIFT, sa.BigInteger)
    clamped = sa.func.least(
        sa.func.greatest(column, double(-RATIO_CLAMP)), double(RATIO_CLAMP)
    )
    thousandths = sa.func.floor(clamped * double(float(RATIO_SCALE)) + double(0.5))
    # floor(v / 2**(31 k)), k = 0 .. RATIO_DIGITS: exact in doubles.
    floors = [thousandths] + [
        sa.func.floor(thousandths * double(2.0 ** (-31 * k)))
        for k in range(1, RATIO_DIGITS + 1)
    ]
    digits = [floors[k] - floors[k + 1] * double(2.0**31) for k in range(RATIO_DIGITS)]
    large = bigint(sum(digits, floors[-1]) + double(float(PRIME)))
    return sa.case(
        (
            sa.and_(column > double(-RATIO_SMALL), column < double(RATIO_SMALL)),
            small,
        ),
        else_=large,
    )


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
                _sql_ratio(dialect, INV.c.allocation_ratio),
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
        dbapi_conn.create_function(_RATIO_FUNCTION, 1, _TERMS[""], deterministic=True)
    found = list(before) if only is not None and before else empty()
    for table, count, total in conn.execute(statement):
        found[2 * table], found[2 * table + 1] = int(count), int(total)
    return found
