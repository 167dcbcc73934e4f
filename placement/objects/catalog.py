"""The per-worker provider catalog: providers, their trees, inventories,
traits, aggregates and names, kept in memory while they are current.

Everything but usage and generations changes rarely. ``catalog_changes``
(db/tables.py) counts every committed write that could change what is kept
here; a request reads that count (the stamp) in its own transaction and
uses the catalog only when it was read at the same stamp. A stale or
missing catalog is read again, in one consistent snapshot, by one request
of the worker; the others meanwhile read through SQL, so answers are the
same either way. Users: the candidate engine's stage 2 and the unfiltered
provider list. See "Provider catalog" in doc/architecture.md.
"""

import collections
import contextlib
import threading
import typing
import weakref

import sqlalchemy as sa

from placement import events
from placement.conf import CONF
from placement.db import api as db_api
from placement.db import tables

RP, INV = tables.resource_providers, tables.inventories

SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"


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


class Catalog:
    """Every provider with its tree, inventories (without usage), traits
    and aggregates, as of ``stamp`` catalog changes. Never modified."""

    def __init__(self, conn: sa.Connection):
        # The stamp first, in the same snapshot as everything below.
        self.stamp = db_api.catalog_stamp(conn)
        self.providers, self.uuids, self.names = {}, {}, {}
        self.members: dict = collections.defaultdict(list)  # root -> providers
        for rp, uuid, name, parent, root in conn.execute(
            sa.select(
                RP.c.id,
                RP.c.uuid,
                RP.c.name,
                RP.c.parent_provider_id,
                RP.c.root_provider_id,
            )
        ):
            self.providers[rp] = Provider(rp, parent, root)
            self.uuids[rp] = uuid
            self.names[rp] = name
            self.members[root].append(rp)
        self.roots = sorted(self.members)
        self.nested = len(self.roots) < len(self.providers)
        # Inventories as if unused, ready to be copied per request: only
        # the ones with usage are replaced.
        self.idle: dict = collections.defaultdict(dict)  # class -> {(rp, class):
        #           Inventory}
        self.holders: dict = collections.defaultdict(dict)  # class -> {rp: Provider}
        # The same per tree, for the pages of a limited search.
        self.idle_in_tree: dict = collections.defaultdict(
            lambda: collections.defaultdict(dict)
        )  # root -> class -> ...
        self.by_provider: dict = collections.defaultdict(list)  # rp -> (class,
        #        Inventory)
        for row in conn.execute(
            sa.select(
                INV.c.resource_provider_id, INV.c.resource_class_id, *STOCK_COLUMNS
            )
        ):
            rp, rc = row[0], row[1]
            idle = Inventory(*row[2:], 0)
            provider = self.providers[rp]
            self.idle[rc][rp, rc] = idle
            self.holders[rc][rp] = provider
            self.idle_in_tree[provider.root_id][rc][rp, rc] = idle
            self.by_provider[rp].append((rc, idle))
        self.traits = _grouped(conn, tables.resource_provider_traits.c.trait_id)
        self.aggregates = _grouped(
            conn, tables.resource_provider_aggregates.c.aggregate_id
        )
        self.trait_holders = _inverted(self.traits)
        self.aggregate_members = _inverted(self.aggregates)
        self.ids = {uuid: rp for rp, uuid in self.uuids.items()}
        self.class_names = _pairs(conn, tables.resource_classes, "id", "name")
        self.class_ids = {name: rc for rc, name in self.class_names.items()}
        trait_names = _pairs(conn, tables.traits, "id", "name")
        self.trait_ids = {name: t for t, name in trait_names.items()}
        self.aggregate_ids = _pairs(conn, tables.placement_aggregates, "uuid", "id")
        # A provider's traits are listed in trait id order.
        self.trait_names = {
            rp: tuple(trait_names[t] for t in sorted(ids))
            for rp, ids in self.traits.items()
        }
        sharing_trait = next(
            (t for t, name in trait_names.items() if name == SHARING_TRAIT), None
        )
        self.serves = {
            rp: self._served_roots(rp)
            for rp in self.trait_holders.get(sharing_trait, ())
        }
        self.sharing_classes = {
            rc for rp in self.serves for rc, _ in self.by_provider.get(rp, ())
        }
        # Plain dicts from here on: threads share the catalog, and a lookup
        # of a missing key must not write to it.
        self.members = dict(self.members)
        self.idle, self.holders = dict(self.idle), dict(self.holders)
        self.by_provider = dict(self.by_provider)
        self.idle_in_tree = {
            root: dict(per_class) for root, per_class in self.idle_in_tree.items()
        }

    def _served_roots(self, rp):
        """Its own root and the roots of every provider sharing an
        aggregate with it (doc/api.md "Terms")."""
        roots = {self.providers[rp].root_id}
        for aggregate in self.aggregates.get(rp, ()):
            roots.update(
                self.providers[other].root_id
                for other in self.aggregate_members[aggregate]
            )
        return frozenset(roots)


def _pairs(conn, table, key, value):
    return dict(conn.execute(sa.select(table.c[key], table.c[value])).all())


def _grouped(conn, column):
    """{provider id: frozenset of ``column`` values} of its table."""
    into = collections.defaultdict(set)
    rp_column = column.table.c.resource_provider_id
    for rp, value in conn.execute(sa.select(rp_column, column)):
        into[rp].add(value)
    return {rp: frozenset(values) for rp, values in into.items()}


def _inverted(pairs):
    into = collections.defaultdict(list)
    for rp, values in pairs.items():
        for value in values:
            into[value].append(rp)
    return dict(into)


class _Cache:
    """One database's catalog in this process."""

    def __init__(self):
        self.catalog = None
        self.reading = threading.Lock()

    def current(self, db, conn):
        """The catalog when it is (or could be made) current, else None
        (the caller reads through SQL)."""
        stamp = db_api.catalog_stamp(conn)
        catalog = self.catalog
        outcome = "hit"
        if catalog is None or catalog.stamp != stamp:
            # One request reads the catalog again; the others don't wait.
            if not self.reading.acquire(blocking=False):
                events.catalog_used("sql")
                return None
            try:
                catalog = self._read(db, conn)
            finally:
                self.reading.release()
            outcome = "read"
        # A catalog read after writes this transaction does not see is
        # kept for the next request, but this one reads through SQL.
        if catalog.stamp != stamp:
            outcome = "sql"
        events.catalog_used(outcome)
        return catalog if outcome != "sql" else None

    def _read(self, db, conn):
        with _snapshot(db, conn) as reading:
            catalog = self.catalog = Catalog(reading)
        return catalog

    def warm(self, db):
        with self.reading, db.reader() as conn:
            if self.catalog is None or self.catalog.stamp != db_api.catalog_stamp(conn):
                self._read(db, conn)


@contextlib.contextmanager
def _snapshot(db, conn):
    """A transaction that reads one snapshot of the database, whatever
    commits meanwhile: the catalog's statements must agree with each other
    (an inventory of a provider the provider statement did not see would
    have nowhere to go). A SQLite transaction, such as the request's, reads
    one snapshot already. MySQL sessions run READ COMMITTED, where every
    statement sees the latest commits, so the catalog is read on a
    connection of its own at REPEATABLE READ, whose first read fixes the
    snapshot for the whole transaction (the same on PostgreSQL)."""
    if db.dialect == "sqlite":
        yield conn
        return
    with db.engine.connect() as own:
        own = own.execution_options(isolation_level="REPEATABLE READ")
        with own.begin():
            yield own


_CACHES: "weakref.WeakKeyDictionary[db_api.Database, _Cache]" = (
    weakref.WeakKeyDictionary()
)
_CACHES_LOCK = threading.Lock()


def _cache(db):
    with _CACHES_LOCK:
        cache = _CACHES.get(db)
        if cache is None:
            cache = _CACHES[db] = _Cache()
    return cache


def current(db: db_api.Database, conn: sa.Connection) -> Catalog | None:
    """The catalog of ``db`` at the stamp ``conn``'s transaction reads, or
    None when the caller should read through SQL (the catalog is off, or
    being read by another request, or newer than this transaction)."""
    if not CONF.placement.provider_catalog:
        return None
    return _cache(db).current(db, conn)


def warm(db: db_api.Database) -> None:
    """Bring the catalog of ``db`` up to date now, outside any request (if
    it is on): a process calls this before it takes requests, so that no
    user's request waits for the first read."""
    if CONF.placement.provider_catalog:
        _cache(db).warm(db)
