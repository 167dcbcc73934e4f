"""The catalog's rows: its value types (``Provider``, ``Inventory``) and
the reading of some or all providers' rows, with their inventories,
traits and aggregates, in one snapshot (``Rows``), and of names."""

import collections
import functools
import itertools
import typing
from collections.abc import Iterable

import numpy as np
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.catalog import bulk
from placement.objects.catalog import runs

RP, INV = tables.resource_providers, tables.inventories
RPT, RPA = tables.resource_provider_traits, tables.resource_provider_aggregates
AGG = tables.placement_aggregates


class Inventory(typing.NamedTuple):
    """One inventory with its usage; the catalog keeps them with used=0."""

    # A tuple: hundreds of thousands are built per request on big trees.
    total: int
    reserved: int
    allocation_ratio: float
    min_unit: int
    max_unit: int
    step_size: int
    used: int

    @property
    def capacity(self) -> int:
        """Capacity as reported (truncated)."""
        return int((self.total - self.reserved) * self.allocation_ratio)

    def fits(self, amount: int) -> bool:
        """One request group's amount: every inventory constraint."""
        return (
            self.used + amount <= (self.total - self.reserved) * self.allocation_ratio
            and self.min_unit <= amount <= self.max_unit
            and amount % self.step_size == 0
        )

    def fits_sum(self, amount: int) -> bool:
        """Several groups' amounts on one provider: capacity and max_unit
        only (min_unit and step_size hold per group)."""
        return self.used + amount <= self.capacity and amount <= self.max_unit


class Provider(typing.NamedTuple):
    id: int
    parent_id: int | None
    root_id: int


# An inventory row's Inventory fields but usage.
STOCK_COLUMNS = (
    INV.c.total,
    INV.c.reserved,
    INV.c.allocation_ratio,
    INV.c.min_unit,
    INV.c.max_unit,
    INV.c.step_size,
)


# An inventory's integer Inventory fields as one string, "total,reserved,
# min_unit,max_unit,step_size".
_JOINED: sa.ColumnElement[str] = functools.reduce(
    lambda joined, column: joined + "," + sa.cast(column, sa.String),
    (INV.c.reserved, INV.c.min_unit, INV.c.max_unit, INV.c.step_size),
    typing.cast(sa.ColumnElement[str], sa.cast(INV.c.total, sa.String)),
)


def _every_and_some(statement: sa.Select, column: sa.Column) -> tuple:
    """(``statement`` for every provider, for the providers whose ids are
    bound as ``ids`` in ``column``), indexed by whether some are wanted."""
    return statement, statement.where(column.in_(db_api.int_list("ids")))


# ``Rows``' statements: providers (by id), inventories, traits, aggregates.
_PROVIDERS = _every_and_some(
    sa.select(
        RP.c.id, RP.c.uuid, RP.c.name, RP.c.parent_provider_id, RP.c.root_provider_id
    ).order_by(RP.c.id),
    RP.c.id,
)
_INVENTORIES = _every_and_some(
    sa.select(
        INV.c.resource_provider_id,
        INV.c.resource_class_id,
        INV.c.allocation_ratio,
        _JOINED,
    ),
    INV.c.resource_provider_id,
)
_TRAITS = _every_and_some(
    sa.select(RPT.c.resource_provider_id, RPT.c.trait_id), RPT.c.resource_provider_id
)
_AGGREGATES = _every_and_some(
    sa.select(RPA.c.resource_provider_id, RPA.c.aggregate_id),
    RPA.c.resource_provider_id,
)


class State(typing.NamedTuple):
    provider: Provider | None  # None: there is no such provider
    inventories: dict  # class -> Inventory
    traits: frozenset
    aggregates: frozenset
    uuid: str | None
    name: str | None


class Joined(typing.NamedTuple):
    """The columns a whole read was made from (``Rows.whole``): numpy
    arrays, a value per row of each table, for what is computed over
    every row at once (``fingerprint.of_joined``)."""

    providers: tuple  # id, parent (0: none), root (0: none), nameless, uuid, name
    inventories: tuple  # provider, class, total, reserved, min, max, step, ratio
    traits: tuple  # provider, trait
    aggregates: tuple  # provider, aggregate


class Rows:
    """Rows of some providers (ids; None: all), read in one snapshot."""

    # The columns it was read from, where read whole as joined columns.
    joined: Joined | None = None

    def __init__(self, conn, wanted):
        # Each statement built once and run on the driver's cursor
        # (``db_api.plain_rows``): through ``conn.execute`` the four
        # statements of one provider's change, built anew, cost 2.3 ms of
        # CPU, which every worker pays for every inventory a host PUTs.
        some = wanted is not None
        params = {"ids": sorted(wanted)} if some else None
        self.providers = {
            rp: (Provider(rp, parent, root), uuid, name)
            for rp, uuid, name, parent, root in db_api.plain_rows(
                conn, _PROVIDERS[some], params
            )
        }
        self.inventories: dict = collections.defaultdict(dict)
        # Hosts alike have equal inventories, traits and aggregates: one
        # object each (a cloud of 100,000 hosts of a few kinds holds a
        # few Inventory tuples, not 300,000).
        one = Interned()
        # The integer columns come joined in one string: the driver's cost
        # is mostly per field (2.4 of 3.2 million fields at 100,000 hosts
        # were inventories'), and equal strings are parsed once.
        parsed: dict = {}
        for rp, rc, ratio, joined in db_api.plain_rows(
            conn, _INVENTORIES[some], params
        ):
            inventory = parsed.get((joined, ratio))
            if inventory is None:
                total, reserved, least, most, step = map(int, joined.split(","))
                inventory = parsed[joined, ratio] = one(
                    Inventory(total, reserved, ratio, least, most, step, 0)
                )
            self.inventories[rp][rc] = inventory
        self.traits = _grouped(conn, _TRAITS[some], params, one)
        self.aggregates = _grouped(conn, _AGGREGATES[some], params, one)

    @classmethod
    def whole(cls, conn: sa.Connection) -> "Rows":
        """Every provider's rows, as ``Rows(conn, None)`` reads them, but
        through ``bulk``'s joined columns: a few hundred rows instead of
        millions at 1,000,000 providers, whose parsing one value at a time
        by the driver was most of placement-api's start (issue 44). Row by
        row after all where the joined text cannot be trusted (a name or
        uuid holding the separator: ``bulk.columns``), or whose
        inventories' ratios have no exact text."""
        stock = _whole_inventories(conn)
        if stock is None:
            return cls(conn, None)
        self = cls.__new__(cls)
        provider_columns = _provider_columns(conn)
        self.providers = _whole_providers(*provider_columns)
        one = Interned()
        trait_links = _links(conn, RPT.c.trait_id)
        aggregate_links = _links(conn, RPA.c.aggregate_id)
        self.traits = _whole_grouped(trait_links, one)
        self.aggregates = _whole_grouped(aggregate_links, one)
        self.joined = Joined(provider_columns, stock, trait_links, aggregate_links)
        return self

    @functools.cached_property
    def inventories(self) -> dict:
        """{rp: {class: Inventory}}: read whole, made from the joined
        columns when asked (the catalog makes its maps from them at once:
        ``stock_maps``)."""
        assert self.joined is not None  # read one by one: set by __init__
        found: dict = collections.defaultdict(dict)
        one = Interned()
        rp, rc, *numbers = (column.tolist() for column in self.joined.inventories)
        for at, (total, reserved, least, most, step, ratio) in enumerate(zip(*numbers)):
            found[rp[at]][rc[at]] = one(
                Inventory(total, reserved, ratio, least, most, step, 0)
            )
        return found

    def state(self, rp: int) -> State:
        """What the database has of provider ``rp``."""
        found = self.providers.get(rp)
        provider, uuid, name = found if found is not None else (None, None, None)
        return State(
            provider,
            self.inventories.get(rp, {}),
            self.traits.get(rp, frozenset()),
            self.aggregates.get(rp, frozenset()),
            uuid,
            name,
        )


def aggregate_ids_of(conn: sa.Connection, ids: Iterable[int]) -> dict[str, int]:
    return dict(
        conn.execute(
            sa.select(AGG.c.uuid, AGG.c.id).where(
                AGG.c.id.in_(sa.bindparam("ids", expanding=True))
            ),
            {"ids": sorted(ids)},
        ).all()
    )


def pairs(conn: sa.Connection, table: sa.Table, key: str, value: str) -> dict:
    """{key: value} of every row of ``table``."""
    return dict(conn.execute(sa.select(table.c[key], table.c[value])).all())


def names(
    conn: sa.Connection,
    table: sa.Table,
    known: dict,
    ids: Iterable[int] | None,
    column: sa.ColumnElement | None = None,
) -> dict:
    """{id: name} of ``table`` (or {id: ``column``}): ``known`` with the
    rows of ``ids`` read again (None: every row)."""
    value = table.c.name if column is None else column
    if ids is None:
        return dict(conn.execute(sa.select(table.c.id, value)).all())
    names = {i: name for i, name in known.items() if i not in ids}
    names.update(
        conn.execute(
            sa.select(table.c.id, value).where(
                table.c.id.in_(sa.bindparam("ids", expanding=True))
            ),
            {"ids": sorted(ids)},
        ).all()
    )
    return names


def _provider_columns(conn):
    """Every provider's id, parent, root, whether its name is NULL, uuid
    and name, as joined columns."""
    # NULLs would be skipped by the join: 0 is no id, and a flag tells a
    # NULL name from an empty one.
    nameless = sa.case((RP.c.name.is_(None), 1), else_=0)
    return bulk.columns(
        conn,
        RP,
        RP.c.id,
        [
            RP.c.id,
            sa.func.coalesce(RP.c.parent_provider_id, 0),
            sa.func.coalesce(RP.c.root_provider_id, 0),
            nameless,
            RP.c.uuid,
            sa.func.coalesce(RP.c.name, ""),
        ],
        text=(4, 5),
    )


def _whole_providers(rp, parent, root, nulls, uuids, names):
    """{id: (Provider, uuid, name)} of every provider, in id order, from
    its joined columns (``_provider_columns``), built by zip rather than
    provider by provider (a second of CPU at 1,000,000 providers)."""
    order = np.argsort(rp, kind="stable")
    at = order.tolist()
    ids = rp[order].tolist()
    found = itertools.starmap(
        Provider,
        zip(
            ids,
            [up or None for up in parent[order].tolist()],
            [top or None for top in root[order].tolist()],
        ),
    )
    named = [None if null else names[i] for i, null in zip(at, nulls[order].tolist())]
    return dict(zip(ids, zip(found, [uuids[i] for i in at], named)))


def _whole_inventories(conn):
    """Every inventory as arrays: provider, class, total, reserved,
    min_unit, max_unit, step_size, allocation_ratio (float); None where
    the ratios' text is not exactly the driver's values."""
    rp, rc, total, reserved, least, most, step, ratio = bulk.columns(
        conn,
        INV,
        INV.c.id,
        [
            INV.c.resource_provider_id,
            INV.c.resource_class_id,
            INV.c.total,
            INV.c.reserved,
            INV.c.min_unit,
            INV.c.max_unit,
            INV.c.step_size,
            INV.c.allocation_ratio,
        ],
        text=(7,),
    )
    # A few distinct ratios: each text parsed once, and the parse trusted
    # only where it gives the driver's values one to one.
    texts = set(ratio)
    value = {text: float(text) for text in texts}
    driver = {r for (r,) in conn.execute(sa.select(INV.c.allocation_ratio).distinct())}
    if len(texts) != len(driver) or not set(value.values()) <= driver:
        return None
    ratios = np.array([value[t] for t in ratio], dtype=np.float64)
    return rp, rc, total, reserved, least, most, step, ratios


def _links(conn, column):
    """Every row of ``column``'s table (traits' or aggregates' links) as
    joined columns: provider, ``column``."""
    rp_column = column.table.c.resource_provider_id
    return bulk.columns(
        conn, column.table, rp_column, [rp_column, column], unique=(column,)
    )


def _whole_grouped(links, one):
    """``_grouped`` of every provider, from its table's joined columns
    (``_links``): equal sets made once (a loop adding every link to a set
    took 0.5 s of CPU for 1,000,000 providers' traits)."""
    rp, values = links
    order = np.lexsort((values, rp))
    return runs.grouped(rp[order], values[order], lambda listed: one(frozenset(listed)))


def _grouped(conn, statement, params, one):
    """{provider id: frozenset of the values} of ``statement``'s (provider,
    value) rows (equal sets one object, through ``one``)."""
    into = collections.defaultdict(set)
    for rp, value in db_api.plain_rows(conn, statement, params):
        into[rp].add(value)
    return {rp: one(frozenset(values)) for rp, values in into.items()}


class Interned(dict):
    """Called with an immutable value: the first equal one it was called
    with (so equal values read apart are one object)."""

    def __call__(self, value):
        return self.setdefault(value, value)
