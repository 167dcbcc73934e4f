"""Stage 2, cached: a per-worker copy of the providers' structure.

Everything the search reads except usage changes rarely: providers and
their trees, inventories, traits, aggregates, sharing and names. A worker
keeps one ``Catalog`` of all of it in memory and uses it while it is
current: ``catalog_changes`` (db/tables.py) counts every committed write
that could change it, and a request compares that count, read in its own
transaction, with the one the catalog was read at. Usage is always read
fresh, with one grouped query over the allocations of the requested
classes. A stale or missing catalog is read again by one request of the
worker; requests meanwhile use the plain SQL stage (``providers.Reader``),
so answers are the same either way.
"""
import collections
import threading
import weakref

import sqlalchemy as sa

from placement.conf import CONF
from placement.db import api as db_api
from placement.db import tables
from placement.objects.allocation_candidates import providers as sql

RP, INV, ALLOC = sql.RP, sql.INV, sql.ALLOC
RPT, RPA, TRAIT, AGG = sql.RPT, sql.RPA, sql.TRAIT, sql.AGG
RC = tables.resource_classes

STOCK = (INV.c.resource_provider_id, INV.c.resource_class_id, INV.c.total,
         INV.c.reserved, INV.c.allocation_ratio, INV.c.min_unit,
         INV.c.max_unit, INV.c.step_size)

_USED = sa.cast(sa.func.sum(ALLOC.c.used), sa.Integer)
USAGE_OF_CLASSES = (
    sa.select(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id, _USED)
    .where(ALLOC.c.resource_class_id.in_(
        sa.bindparam("classes", expanding=True)))
    .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id))
USAGE_OF_PROVIDERS = (
    sa.select(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id, _USED)
    .where(ALLOC.c.resource_provider_id.in_(
        sa.bindparam("providers", expanding=True)))
    .group_by(ALLOC.c.resource_provider_id, ALLOC.c.resource_class_id))


class Catalog:
    """Every provider with its tree, inventories (without usage), traits
    and aggregates, as of ``stamp`` catalog changes. Never modified."""

    def __init__(self, conn, stamp):
        self.stamp = stamp
        self.providers, self.uuids, self.names = {}, {}, {}
        self.members = collections.defaultdict(list)    # root -> providers
        for rp, uuid, name, parent, root in conn.execute(sa.select(
                RP.c.id, RP.c.uuid, RP.c.name, RP.c.parent_provider_id,
                RP.c.root_provider_id)):
            self.providers[rp] = sql.Provider(rp, parent, root)
            self.uuids[rp] = uuid
            self.names[rp] = name
            self.members[root].append(rp)
        self.roots = sorted(self.members)
        self.nested = len(self.roots) < len(self.providers)
        # Inventories as if unused, ready to be copied per request: only
        # the ones with usage are replaced.
        self.idle = collections.defaultdict(dict)     # class -> {(rp, class):
                                                      #           Inventory}
        self.holders = collections.defaultdict(dict)  # class -> {rp: Provider}
        # The same per tree, for the pages of a limited search.
        self.idle_in_tree = collections.defaultdict(
            lambda: collections.defaultdict(dict))    # root -> class -> ...
        self.by_provider = collections.defaultdict(list)  # rp -> (class,
                                                          #        Inventory)
        for row in conn.execute(sa.select(*STOCK)):
            rp, rc = row[0], row[1]
            idle = sql.Inventory(*row[2:], 0)
            provider = self.providers[rp]
            self.idle[rc][rp, rc] = idle
            self.holders[rc][rp] = provider
            self.idle_in_tree[provider.root_id][rc][rp, rc] = idle
            self.by_provider[rp].append((rc, idle))
        self.traits = _grouped(conn, RPT, RPT.c.trait_id)
        self.aggregates = _grouped(conn, RPA, RPA.c.aggregate_id)
        self.trait_holders = _inverted(self.traits)
        self.aggregate_members = _inverted(self.aggregates)
        self.ids = {uuid: rp for rp, uuid in self.uuids.items()}
        self.class_names = dict(conn.execute(sa.select(RC.c.id, RC.c.name)).all())
        self.class_ids = {name: rc for rc, name in self.class_names.items()}
        trait_names = dict(conn.execute(sa.select(TRAIT.c.id, TRAIT.c.name)).all())
        self.trait_ids = {name: t for t, name in trait_names.items()}
        self.aggregate_ids = dict(conn.execute(
            sa.select(AGG.c.uuid, AGG.c.id)).all())
        self.trait_names = {rp: tuple(sorted(trait_names[t] for t in ids))
                            for rp, ids in self.traits.items()}
        sharing_trait = next((t for t, name in trait_names.items()
                              if name == sql.SHARING_TRAIT), None)
        self.serves = {rp: self._served_roots(rp)
                       for rp in self.trait_holders.get(sharing_trait, ())}
        self.sharing_classes = {rc for rp in self.serves
                                for rc, _ in self.by_provider.get(rp, ())}
        # Plain dicts from here on: threads share the catalog, and a lookup
        # of a missing key must not write to it.
        self.members = dict(self.members)
        self.idle, self.holders = dict(self.idle), dict(self.holders)
        self.by_provider = dict(self.by_provider)
        self.idle_in_tree = {root: dict(per_class) for root, per_class
                             in self.idle_in_tree.items()}

    def _served_roots(self, rp):
        """Its own root and the roots of every provider sharing an
        aggregate with it (contract §3 "Serves")."""
        roots = {self.providers[rp].root_id}
        for aggregate in self.aggregates.get(rp, ()):
            roots.update(self.providers[other].root_id
                         for other in self.aggregate_members[aggregate])
        return frozenset(roots)


def _grouped(conn, table, column):
    into = collections.defaultdict(set)
    for rp, value in conn.execute(sa.select(table.c.resource_provider_id,
                                            column)):
        into[rp].add(value)
    return {rp: frozenset(values) for rp, values in into.items()}


def _inverted(pairs):
    into = collections.defaultdict(list)
    for rp, values in pairs.items():
        for value in values:
            into[value].append(rp)
    return dict(into)


class Reader:
    """The SQL stage's interface (``providers.Reader``) answered from a
    current catalog, reading only usage from the database."""

    def __init__(self, conn, catalog):
        self.conn = conn
        self.catalog = catalog
        self.sql = sql.Reader(conn)

    # Names the catalog doesn't know don't exist: the SQL lookups raise
    # the contract's errors for them.

    def class_ids(self, names):
        return _ids(self.catalog.class_ids, names, self.sql.class_ids)

    def trait_ids(self, names):
        return _ids(self.catalog.trait_ids, names, self.sql.trait_ids)

    def aggregate_ids(self, uuids):
        known = self.catalog.aggregate_ids
        return {uuid: known[uuid] for uuid in uuids if uuid in known}

    def root_of(self, provider_uuid):
        for spelling in sql._uuid_spellings([provider_uuid]):
            rp = self.catalog.ids.get(spelling)
            if rp is not None:
                return self.catalog.providers[rp].root_id
        return self.sql.root_of(provider_uuid)

    def root_ids(self):
        return self.catalog.roots

    def sharing_holds(self, class_ids):
        return not self.catalog.sharing_classes.isdisjoint(class_ids)

    def is_nested(self):
        return self.catalog.nested

    def uuids(self, provider_ids):
        return {rp: self.catalog.uuids[rp] for rp in provider_ids
                if rp in self.catalog.uuids}

    def _usage(self, statement, name, ids, classes=None):
        """{(provider, class): used}, binding long id lists in chunks."""
        used = {}
        for chunk in sql._chunks(ids):
            for rp, rc, amount in self.conn.execute(
                    statement, {name: chunk}):
                if classes is None or rc in classes:
                    used[rp, rc] = amount
        return used

    def snapshot(self, class_ids, trait_ids, aggregate_ids,
                 whole_trees=False, roots=None):
        """As ``providers.load_snapshot``."""
        catalog = self.catalog
        every = catalog.providers
        inventories, providers = {}, {}
        if roots is None:
            for rc in class_ids:
                inventories.update(catalog.idle.get(rc, {}))
                providers.update(catalog.holders.get(rc, {}))
            used = self._usage(USAGE_OF_CLASSES, "classes", class_ids)
        else:
            for root in roots:
                tree = catalog.idle_in_tree.get(root)
                for rc in class_ids if tree else ():
                    held = tree.get(rc)
                    if held:
                        inventories.update(held)
                        providers.update((rp, every[rp]) for rp, _ in held)
            used = self._usage(USAGE_OF_PROVIDERS, "providers", providers,
                               set(class_ids))
        for key, amount in used.items():
            idle = inventories.get(key)
            if idle is not None:
                inventories[key] = idle._replace(used=amount)
        serves = {rp: catalog.serves[rp] for rp in providers
                  if rp in catalog.serves}
        anchors = {p.root_id for p in providers.values()}
        anchors.update(*serves.values())
        for root in anchors:
            if whole_trees:
                providers.update((rp, every[rp])
                                 for rp in catalog.members.get(root, ()))
            elif root not in providers:
                providers[root] = every[root]
        return sql.Snapshot(
            providers=providers, inventories=inventories,
            traits=_of_interest(catalog.trait_holders, trait_ids, providers),
            aggregates=_of_interest(catalog.aggregate_members, aggregate_ids,
                                    providers),
            serves=serves, nested=catalog.nested)

    def summaries(self, root_ids, known, class_names, provider_ids=None):
        """As ``providers.load_summaries``."""
        catalog = self.catalog
        inventories = collections.defaultdict(dict)
        for (rp, rc), inventory in known:
            inventories[rp][class_names[rc]] = inventory
        members = [rp for root in root_ids
                   for rp in catalog.members.get(root, ())]
        others = [(rp, rc, idle) for rp in members
                  for rc, idle in catalog.by_provider.get(rp, ())
                  if rc not in class_names]
        if others:
            used = self._usage(USAGE_OF_PROVIDERS, "providers",
                               {rp for rp, _, _ in others})
            names = catalog.class_names
            for rp, rc, idle in others:
                amount = used.get((rp, rc))
                inventories[rp][names[rc]] = (
                    idle if amount is None else idle._replace(used=amount))
        uuids = catalog.uuids
        if provider_ids is not None:
            members = [rp for rp in members if rp in provider_ids]
        out = {}
        for rp in members:
            provider = catalog.providers[rp]
            out[rp] = sql.Summary(
                uuids[rp], uuids.get(provider.parent_id),
                uuids[provider.root_id], inventories.get(rp, {}),
                catalog.trait_names.get(rp, ()))
        return out


def _ids(known, names, lookup):
    """{name: id} from ``known``, or from ``lookup`` (which raises the
    not-found error) when some name is missing."""
    if not all(name in known for name in names):
        return lookup(names)
    return {name: known[name] for name in names}


def _of_interest(holders, wanted, providers):
    """{provider: frozenset of the ``wanted`` values it has} for the
    snapshot's providers (an index lookup per wanted value)."""
    into = collections.defaultdict(set)
    for value in wanted:
        for rp in holders.get(value, ()):
            if rp in providers:
                into[rp].add(value)
    return {rp: frozenset(values) for rp, values in into.items()}


class _Cache:
    """One database's catalog in this process."""

    def __init__(self):
        self.catalog = None
        self.reading = threading.Lock()

    def current(self, conn):
        """The catalog when it is (or could be made) current, else None
        (the caller reads through SQL)."""
        stamp = db_api.catalog_stamp(conn)
        catalog = self.catalog
        if catalog is None or catalog.stamp != stamp:
            # One request reads the catalog again; the others don't wait.
            if not self.reading.acquire(blocking=False):
                return None
            try:
                # Same transaction as the stamp: a later change makes the
                # next request's stamp differ, never an older one match.
                catalog = self.catalog = Catalog(conn, stamp)
            finally:
                self.reading.release()
        return catalog


_CACHES = weakref.WeakKeyDictionary()      # Database -> _Cache
_CACHES_LOCK = threading.Lock()


def current(db, conn):
    """The current catalog of ``db`` as seen by ``conn``'s transaction, or
    None when the caller should read through SQL."""
    if not CONF.placement.provider_catalog:
        return None
    with _CACHES_LOCK:
        cache = _CACHES.get(db)
        if cache is None:
            cache = _CACHES[db] = _Cache()
    return cache.current(conn)


def reader(db, conn):
    """A ``Reader`` on the current catalog of ``db``, or None."""
    catalog = current(db, conn)
    return Reader(conn, catalog) if catalog is not None else None
