"""The per-worker provider catalog: providers, their trees, inventories,
traits, aggregates and names, kept in memory and kept current.

Everything but usage and generations changes rarely. ``catalog_changes``
(db/tables.py) counts every committed write that changes what is kept
here, and ``catalog_log`` says what each one changed; a request reads the
count (the stamp) in its own transaction and uses the catalog only at the
same stamp. A catalog that is behind is brought up to date by one request
of the worker, in one consistent snapshot: by reading again only what the
log names (the others wait, briefly), or whole when the log cannot tell
(the others read through SQL meanwhile), so answers are the same either
way. It is read first as the worker starts (``warm``). Users: the
candidate engine's stage 2 and the unfiltered provider list. See
"Provider catalog" in doc/architecture.md.
"""

import collections
import contextlib
import copy
import threading
import typing
import weakref

import sqlalchemy as sa

from placement import events
from placement.conf import CONF
from placement.db import api as db_api
from placement.db import tables

RP, INV = tables.resource_providers, tables.inventories
RPT, RPA = tables.resource_provider_traits, tables.resource_provider_aggregates
RC, T, AGG = tables.resource_classes, tables.traits, tables.placement_aggregates
CHANGES, LOG = tables.catalog_changes, tables.catalog_log

# More logged changes than this since a worker's catalog: it reads the
# catalog whole instead.
MAX_DELTAS = 5000
# How long a request waits for another one to apply deltas.
WAIT_S = 1.0
# How many times a request brings the catalog up to the count its
# transaction sees before it reads through SQL instead.
CHASES = 3


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
    and aggregates, as of ``stamp`` catalog changes (``seqs`` per shard).
    Never modified: following changes makes a new one (``advanced``), which
    shares what did not change."""

    def __init__(self) -> None:
        self.seqs: dict = {}  # shard -> count
        self.stamp = 0
        self.providers: dict = {}  # rp -> Provider
        self.uuids: dict = {}
        self.names: dict = {}
        self.ids: dict = {}  # uuid -> rp
        self.members: dict = {}  # root -> sorted providers of its tree
        self.roots: list = []
        self.nested = False
        # Inventories as if unused, ready to be copied per request: only
        # the ones with usage are replaced.
        self.idle: dict = {}  # class -> {(rp, class): Inventory}
        self.holders: dict = {}  # class -> {rp: Provider}
        # The same per tree, for the pages of a limited search.
        self.idle_in_tree: dict = {}  # root -> class -> {(rp, class): ...}
        self.by_provider: dict = {}  # rp -> [(class, Inventory)] by class
        self.traits: dict = {}  # rp -> frozenset of trait ids
        self.aggregates: dict = {}  # rp -> frozenset of aggregate ids
        self.trait_holders: dict = {}  # trait -> [rp]
        self.aggregate_members: dict = {}  # aggregate -> [rp]
        self.class_names: dict = {}
        self.class_ids: dict = {}
        self.trait_ids: dict = {}  # name -> id
        self.trait_names_by_id: dict = {}
        self.aggregate_ids: dict = {}  # uuid -> id
        # A provider's traits are listed in trait id order.
        self.trait_names: dict = {}  # rp -> tuple of names

    @classmethod
    def read(cls, conn: sa.Connection) -> "Catalog":
        """Everything, in ``conn``'s snapshot."""
        catalog = cls()
        # The counts first, in the same snapshot as everything below.
        catalog._counted(_seqs(conn))
        catalog._read_names(conn, None, None)
        catalog.aggregate_ids = _pairs(conn, AGG, "uuid", "id")
        catalog._whole(_Fresh(conn, None))
        return catalog

    def _whole(self, fresh):
        """Every map built from ``fresh`` rows of all providers (a separate
        way from ``_read_providers``, several times faster than it is for
        everything; the tests hold the two to the same result)."""
        members = collections.defaultdict(list)
        for rp, (provider, uuid, name) in fresh.providers.items():
            self.providers[rp], self.uuids[rp], self.names[rp] = provider, uuid, name
            self.ids[uuid] = rp
            members[provider.root_id].append(rp)
        self.members = dict(members)
        self.roots = sorted(members)
        self.nested = len(self.roots) < len(self.providers)
        idle = collections.defaultdict(dict)
        holders = collections.defaultdict(dict)
        in_tree = collections.defaultdict(lambda: collections.defaultdict(dict))
        for rp, inventories in fresh.inventories.items():
            provider = self.providers[rp]
            self.by_provider[rp] = listed = sorted(inventories.items())
            per_class = in_tree[provider.root_id]
            for rc, inventory in listed:
                idle[rc][rp, rc] = per_class[rc][rp, rc] = inventory
                holders[rc][rp] = provider
        self.idle, self.holders = dict(idle), dict(holders)
        self.idle_in_tree = {root: dict(c) for root, c in in_tree.items()}
        self.traits, self.aggregates = fresh.traits, fresh.aggregates
        self.trait_holders = _inverted(self.traits)
        self.aggregate_members = _inverted(self.aggregates)
        name_of = self.trait_names_by_id
        self.trait_names = {
            rp: tuple(name_of[t] for t in sorted(ids))
            for rp, ids in self.traits.items()
        }

    def advanced(self, conn: sa.Connection, seqs: dict, changes: dict) -> "Catalog":
        """A new catalog: this one with the ``changes`` ({kind: ids}, read
        from the log up to ``seqs``) read again in ``conn``'s snapshot."""
        catalog = copy.copy(self)
        catalog._counted(seqs)
        classes = changes.get(db_api.RESOURCE_CLASS)
        traits = changes.get(db_api.TRAIT)
        if classes or traits:
            catalog._read_names(conn, classes, traits)
        if changes.get(db_api.AGGREGATE):
            catalog.aggregate_ids = {
                **self.aggregate_ids,
                **_uuids_of_aggregates(conn, changes[db_api.AGGREGATE]),
            }
        if changes.get(db_api.PROVIDER):
            catalog._read_providers(conn, changes[db_api.PROVIDER])
        return catalog

    def _counted(self, seqs):
        self.seqs, self.stamp = seqs, sum(seqs.values())

    def _read_names(self, conn, class_ids, trait_ids):
        """The names of ``class_ids`` and ``trait_ids`` (None: all) read
        again; a missing one was deleted."""
        if class_ids is None or class_ids:
            self.class_names = _names(conn, RC, self.class_names, class_ids)
            self.class_ids = {name: rc for rc, name in self.class_names.items()}
        if trait_ids is None or trait_ids:
            self.trait_names_by_id = _names(conn, T, self.trait_names_by_id, trait_ids)
            self.trait_ids = {name: t for t, name in self.trait_names_by_id.items()}
            # Names of providers' traits don't change: a trait is deleted
            # only when no provider has it, and never renamed.

    def _read_providers(self, conn, touched):
        """The rows of providers ``touched`` (ids) read again, with their
        inventories, traits and aggregates; the maps that change are
        copies."""
        fresh = _Fresh(conn, touched)
        old = {rp: self._state(rp) for rp in touched}
        new = {rp: fresh.state(rp) for rp in touched}
        changed = [rp for rp in touched if old[rp] != new[rp]]
        if not changed:
            return
        self._per_provider(changed, new)
        self._trees(changed, old, new)
        self._inventories(changed, old, new)
        self.trait_holders = _holders(self.trait_holders, changed, old, new, "traits")
        self.aggregate_members = _holders(
            self.aggregate_members, changed, old, new, "aggregates"
        )

    def _state(self, rp):
        """What this catalog has of provider ``rp``."""
        return _State(
            self.providers.get(rp),
            dict(self.by_provider.get(rp, ())),
            self.traits.get(rp, frozenset()),
            self.aggregates.get(rp, frozenset()),
            self.uuids.get(rp),
            self.names.get(rp),
        )

    def _per_provider(self, changed, new):
        """The maps keyed by provider: copies of those where a changed
        provider's value differs."""
        name_of = self.trait_names_by_id
        values = {
            "providers": lambda s: s.provider,
            "uuids": lambda s: s.uuid,
            "names": lambda s: s.name,
            "by_provider": lambda s: sorted(s.inventories.items()) or None,
            "traits": lambda s: s.traits or None,
            "aggregates": lambda s: s.aggregates or None,
            "trait_names": lambda s: (
                tuple(name_of[t] for t in sorted(s.traits)) or None
            ),
        }
        for attr, value_of in values.items():
            current = getattr(self, attr)
            now = {rp: value_of(new[rp]) for rp in changed}
            if all(current.get(rp) == value for rp, value in now.items()):
                continue
            if attr == "uuids":
                ids = dict(self.ids)
                for rp in now:
                    ids.pop(current.get(rp), None)
                ids.update((uuid, rp) for rp, uuid in now.items() if uuid)
                self.ids = ids
            replaced = dict(current)
            for rp, value in now.items():
                if value is None:
                    replaced.pop(rp, None)
                else:
                    replaced[rp] = value
            setattr(self, attr, replaced)

    def _trees(self, changed, old, new):
        """Members and roots of the trees providers joined or left."""
        left, joined = collections.defaultdict(set), collections.defaultdict(list)
        for rp in changed:
            before, after = old[rp].provider, new[rp].provider
            if before is not None and (
                after is None or after.root_id != before.root_id
            ):
                left[before.root_id].add(rp)
            if after is not None and (
                before is None or before.root_id != after.root_id
            ):
                joined[after.root_id].append(rp)
        if not (left or joined):
            return
        members = dict(self.members)
        for root in left.keys() | joined.keys():
            gone = left.get(root, ())
            tree = [rp for rp in members.get(root, ()) if rp not in gone]
            tree = sorted(tree + joined.get(root, []))
            if tree:
                members[root] = tree
            else:
                members.pop(root, None)
        if members.keys() != self.members.keys():
            self.roots = sorted(members)
        self.members = members
        self.nested = len(self.roots) < len(self.providers)

    def _inventories(self, changed, old, new):
        """idle, holders and idle_in_tree of the classes and trees whose
        inventories (or whose providers' places in a tree) changed."""
        classes, roots = collections.defaultdict(list), set()
        for rp in changed:
            before, after = old[rp].provider, new[rp].provider
            had, has = old[rp].inventories, new[rp].inventories
            moved = before != after
            touched = [
                rc
                for rc in had.keys() | has.keys()
                if moved or had.get(rc) != has.get(rc)
            ]
            for rc in touched:
                classes[rc].append(rp)
            if touched:
                roots.update(p.root_id for p in (before, after) if p is not None)
        if not classes:
            return
        idle, holders = dict(self.idle), dict(self.holders)
        for rc, rps in classes.items():
            idle_rc, holders_rc = dict(idle.get(rc, ())), dict(holders.get(rc, ()))
            for rp in rps:
                provider, inventory = new[rp].provider, new[rp].inventories.get(rc)
                if inventory is None:
                    idle_rc.pop((rp, rc), None)
                    holders_rc.pop(rp, None)
                else:
                    # An existing key keeps its place.
                    idle_rc[rp, rc] = inventory
                    holders_rc[rp] = provider
            if idle_rc:
                idle[rc], holders[rc] = idle_rc, holders_rc
            else:
                idle.pop(rc, None)
                holders.pop(rc, None)
        self.idle, self.holders = idle, holders
        idle_in_tree = dict(self.idle_in_tree)
        for root in roots:
            tree = {}
            for rp in self.members.get(root, ()):
                for rc, inventory in self.by_provider.get(rp, ()):
                    tree.setdefault(rc, {})[rp, rc] = inventory
            if tree:
                idle_in_tree[root] = tree
            else:
                idle_in_tree.pop(root, None)
        self.idle_in_tree = idle_in_tree


class _State(typing.NamedTuple):
    provider: Provider | None  # None: there is no such provider
    inventories: dict  # class -> Inventory
    traits: frozenset
    aggregates: frozenset
    uuid: str | None
    name: str | None


class _Fresh:
    """Rows of some providers (ids; None: all), read in one snapshot."""

    def __init__(self, conn, wanted):
        def where(column):
            if wanted is None:
                return ()
            return (column.in_(sa.bindparam("ids", expanding=True)),)

        params = {} if wanted is None else {"ids": sorted(wanted)}
        self.providers = {
            rp: (Provider(rp, parent, root), uuid, name)
            for rp, uuid, name, parent, root in conn.execute(
                sa.select(
                    RP.c.id,
                    RP.c.uuid,
                    RP.c.name,
                    RP.c.parent_provider_id,
                    RP.c.root_provider_id,
                )
                .where(*where(RP.c.id))
                .order_by(RP.c.id),
                params,
            )
        }
        self.inventories = collections.defaultdict(dict)
        for row in conn.execute(
            sa.select(
                INV.c.resource_provider_id, INV.c.resource_class_id, *STOCK_COLUMNS
            ).where(*where(INV.c.resource_provider_id)),
            params,
        ):
            self.inventories[row[0]][row[1]] = Inventory(*row[2:], 0)
        self.traits = _grouped(conn, RPT.c.trait_id, where, params)
        self.aggregates = _grouped(conn, RPA.c.aggregate_id, where, params)

    def state(self, rp):
        """What the database has of provider ``rp``."""
        found = self.providers.get(rp)
        provider, uuid, name = found if found is not None else (None, None, None)
        return _State(
            provider,
            self.inventories.get(rp, {}),
            self.traits.get(rp, frozenset()),
            self.aggregates.get(rp, frozenset()),
            uuid,
            name,
        )


def _seqs(conn):
    """{shard: count} of catalog changes."""
    return dict(conn.execute(sa.select(CHANGES.c.shard, CHANGES.c.changes)).all())


def _uuids_of_aggregates(conn, ids):
    return dict(
        conn.execute(
            sa.select(AGG.c.uuid, AGG.c.id).where(
                AGG.c.id.in_(sa.bindparam("ids", expanding=True))
            ),
            {"ids": sorted(ids)},
        ).all()
    )


def _pairs(conn, table, key, value):
    return dict(conn.execute(sa.select(table.c[key], table.c[value])).all())


def _names(conn, table, known, ids):
    """{id: name} of ``table``: ``known`` with the rows of ``ids`` read
    again (None: every row)."""
    if ids is None:
        return _pairs(conn, table, "id", "name")
    names = {i: name for i, name in known.items() if i not in ids}
    names.update(
        conn.execute(
            sa.select(table.c.id, table.c.name).where(
                table.c.id.in_(sa.bindparam("ids", expanding=True))
            ),
            {"ids": sorted(ids)},
        ).all()
    )
    return names


def _grouped(conn, column, where, params):
    """{provider id: frozenset of ``column`` values} of its table."""
    into = collections.defaultdict(set)
    rp_column = column.table.c.resource_provider_id
    for rp, value in conn.execute(
        sa.select(rp_column, column).where(*where(rp_column)), params
    ):
        into[rp].add(value)
    return {rp: frozenset(values) for rp, values in into.items()}


def _inverted(pairs):
    into = collections.defaultdict(list)
    for rp, values in pairs.items():
        for value in values:
            into[value].append(rp)
    return dict(into)


def _holders(holders, changed, old, new, field):
    """{value: [providers]} of the providers' traits or aggregates (the
    ``field`` of their states), with the values ``changed`` providers
    gained or lost listed again."""
    gained, lost = collections.defaultdict(list), collections.defaultdict(set)
    for rp in changed:
        had, has = getattr(old[rp], field), getattr(new[rp], field)
        for value in has - had:
            gained[value].append(rp)
        for value in had - has:
            lost[value].add(rp)
    if not (gained or lost):
        return holders
    holders = dict(holders)
    for value in gained.keys() | lost.keys():
        gone = lost.get(value, ())
        members = [rp for rp in holders.get(value, ()) if rp not in gone]
        members += gained.get(value, [])
        if members:
            holders[value] = members
        else:
            holders.pop(value, None)
    return holders


class _Cache:
    """One database's catalog in this process."""

    def __init__(self):
        self.catalog = None
        self.reading = threading.Lock()
        # True while the held lock reads the whole catalog (not deltas).
        self.reading_all = False

    def current(self, db: db_api.Database, conn: sa.Connection) -> Catalog | None:
        """The catalog when it is (or could be made) current, else None
        (the caller reads through SQL)."""
        stamp = db_api.catalog_stamp(conn)
        catalog = self.catalog
        outcome = "hit"
        for _ in range(CHASES):
            if catalog is None or catalog.stamp < stamp:
                # One request brings the catalog up to date. Following
                # deltas takes milliseconds: others wait for it. A whole
                # read takes a second at 70,000 providers: others read
                # through SQL meanwhile.
                if not self._lock(wait=catalog is not None):
                    events.catalog_used("sql")
                    return None
                try:
                    if self.catalog is None or self.catalog.stamp < stamp:
                        if self._refresh(db, conn) == "full":
                            outcome = "read"
                    catalog = self.catalog
                finally:
                    self.reading.release()
            if catalog.stamp == stamp or db.dialect == "sqlite":
                break
            # Brought up to date past the count this transaction read: at
            # READ COMMITTED its next statements see those writes anyway,
            # so it takes the count they see, and catches up with writes
            # that committed meanwhile (under steady writes there is
            # usually one).
            stamp = db_api.catalog_stamp(conn)
        # A catalog newer than this transaction (SQLite reads one snapshot)
        # is kept for the next request, but this one reads through SQL.
        if catalog.stamp != stamp:
            outcome = "sql"
        events.catalog_used(outcome)
        return catalog if outcome != "sql" else None

    def _lock(self, wait):
        if self.reading.acquire(blocking=False):
            return True
        return wait and not self.reading_all and self.reading.acquire(timeout=WAIT_S)

    def _refresh(self, db, conn):
        """Bring the catalog up to date: by its deltas, or read whole when
        there is none yet or the log cannot tell what changed. Returns
        "deltas", "full" or "none" (nothing new)."""
        with _snapshot(db, conn) as reading:
            old = self.catalog
            seqs = _seqs(reading)
            changes = _changes(reading, old.seqs, seqs) if old is not None else None
            if changes == {}:
                return "none"  # no newer than this request
            if changes is None:
                self.reading_all = True
                try:
                    self.catalog = Catalog.read(reading)
                finally:
                    self.reading_all = False
                how = "full"
            else:
                self.catalog = old.advanced(reading, seqs, changes)
                how = "deltas"
        events.catalog_updated(how)
        return how

    def warm(self, db: db_api.Database) -> None:
        with self.reading, db.reader() as conn:
            if self.catalog is None or self.catalog.stamp != db_api.catalog_stamp(conn):
                self._refresh(db, conn)


def _changes(conn, then, now):
    """{kind: set of ids} changed between the counts ``then`` and ``now``
    ({shard: count}), from the log; None when the catalog must be read
    whole: a count went back (shard rows re-created), the log no longer
    has every change (pruned), too many changes, or one of EVERYTHING."""
    ranges = []
    for shard in then.keys() | now.keys():
        low, high = then.get(shard, 0), now.get(shard, 0)
        if high < low:
            return None
        if high > low:
            ranges.append((shard, low, high))
    if not ranges:
        return {}
    if sum(high - low for _, low, high in ranges) > MAX_DELTAS:
        return None
    wanted = sa.or_(
        *(
            sa.and_(LOG.c.shard == shard, LOG.c.seq > low, LOG.c.seq <= high)
            for shard, low, high in ranges
        )
    )
    changes = collections.defaultdict(set)
    numbers = set()
    for shard, seq, kind, ref in conn.execute(
        sa.select(LOG.c.shard, LOG.c.seq, LOG.c.kind, LOG.c.ref).where(wanted)
    ):
        numbers.add((shard, seq))
        changes[kind].add(ref)
    # Each number below a shard's count was committed with it: one that is
    # missing was pruned.
    if len(numbers) != sum(high - low for _, low, high in ranges):
        return None
    if db_api.EVERYTHING in changes:
        return None
    return changes


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


def warm(db: db_api.Database) -> int | None:
    """Bring the catalog of ``db`` up to date now, outside any request (if
    it is on): a process calls this before it takes requests, so that no
    user's request waits for the first read. The number of providers it
    holds, or None when the catalog is off."""
    if not CONF.placement.provider_catalog:
        return None
    cache = _cache(db)
    cache.warm(db)
    return len(cache.catalog.providers) if cache.catalog is not None else 0
