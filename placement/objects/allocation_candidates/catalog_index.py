"""The candidate index: stage 2's ``Index`` (allocation_candidates/
providers.py) answered from the worker's provider catalog while it is
current, no statement but the stamp's; usage too where triggers log every
writer's allocations (the catalog's ``used``), else it is read by
``providers.usage``. ``index`` picks it or SQL's."""

import bisect
import collections
import itertools
import time
from collections.abc import Collection
from collections.abc import Hashable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa

from placement import arrival
from placement import events
from placement.db import api as db_api
from placement.objects.allocation_candidates import kept
from placement.objects.allocation_candidates import providers as stage
from placement.objects.allocation_candidates import sql
from placement.objects.allocation_candidates import tree_summaries
from placement.objects.allocation_candidates.providers import Idle
from placement.objects.allocation_candidates.providers import Inventory
from placement.objects.allocation_candidates.providers import Key
from placement.objects.allocation_candidates.providers import Provider
from placement.objects.catalog import changes
from placement.objects.catalog import columns as catalog_columns
from placement.objects.catalog import history
from placement.objects.catalog import refresh
from placement.objects.catalog import used as catalog_used
from placement.objects.catalog.store import Catalog

# What a request that answered from the held catalog waits, the GIL let go,
# before it sends its own look (where the server's front tells when
# requests arrive: ``arrival``): a worker runs a bounded search in its
# event loop (cmd/rsgi), where the requests that came in meanwhile wait
# for it unseen; let go, the front's thread notes their arrival, before
# the look, which then confirms their answers as well (issue 44).
YIELD_S = 0.0001


class CatalogIndex:
    """``providers.Index`` on a current catalog. Names the catalog doesn't
    know don't exist: the SQL lookups raise the API's errors for them.
    ``conn`` None: no statement is expected (usage in memory, nothing read
    through SQL: ``warm``); one fails (``conn``) rather than go unseen."""

    def __init__(
        self,
        conn: sa.Connection | None,
        catalog: Catalog,
        unconfirmed: bool = False,
        db: db_api.Database | None = None,
        used: catalog_used.Used | None = None,
    ):
        self.db = db
        self._conn = conn
        self.catalog = catalog
        self.unconfirmed = unconfirmed
        # When its request arrived (where the server's front tells:
        # ``arrival``), else when it was made: a look of the host sent
        # after it may confirm it (``confirm``).
        self.made = arrival.get() or time.monotonic()
        # The catalog's usage where it answers usage (``refresh.used_of``).
        self.used = used
        self._sql: sql.SqlIndex | None = None
        # Whether an answer read names through SQL (``sql``).
        self.read_sql = False
        self._sharing = catalog.trait_holders.get(
            catalog.trait_ids.get(stage.SHARING_TRAIT), ()
        )

    @property
    def conn(self) -> sa.Connection:
        if self._conn is None:
            raise RuntimeError("a statement of a catalog index without a connection")
        return self._conn

    def confirm(self, stamp: int | None = None, tokens: int | None = None) -> None:
        if not self.unconfirmed:
            return
        if stamp is None:
            assert self.db is not None  # an unconfirmed index has it
            seen = self._host_look() or self._look()
        else:
            seen = changes.Look(stamp, tokens)
        stamp, tokens = seen.stamp, seen.tokens
        self.unconfirmed = False
        # Another history at the same stamp (a restore): nothing of it holds.
        if history.diverged(self.catalog, stamp, tokens) or (
            stamp != self.catalog.stamp
            and (
                # Usage from memory is the held catalog's: claims since are
                # missing from it (answered again from the catalog at
                # ``stamp``).
                self.used is not None or not self._same_structure(seen)
            )
        ):
            raise Behind(seen)
        events.catalog_used("hit")

    def _look(self) -> changes.Look:
        """This request's own look, sent once the requests that arrived
        meanwhile are known to have (``YIELD_S``): the look confirms their
        answers too (``_host_look``)."""
        assert self.db is not None  # an unconfirmed index has it
        if arrival.get() is not None:
            time.sleep(YIELD_S)
            seen = self._host_look()
            if seen is not None:
                return seen
        return refresh.look(self.db, self.conn, shared=True)

    def _host_look(self) -> changes.Look | None:
        """The look another request (or follower) of this host sent after
        this index was made, when it found the catalog's stamp and tokens
        and this answer is the catalog's alone (its usage from memory, no
        name read through SQL): it confirms the answer as this request's
        own look would have, without a statement (``host_look``)."""
        if self.used is None or self.read_sql:
            return None
        assert self.db is not None  # an unconfirmed index has it
        seen = refresh.host_saw(self.db, self.made)
        catalog = self.catalog
        if seen != (catalog.stamp, catalog.token_sum):
            return None
        return changes.Look(*seen)

    def _by_sql(self) -> sql.SqlIndex:
        """The SQL index, for what the catalog does not know (names)."""
        self.read_sql = True
        if self._sql is None:
            self._sql = sql.SqlIndex(self.conn)
        return self._sql

    def _same_structure(self, seen):
        """Whether the catalog at the look ``seen`` (brought there by the
        log) has the structure this one answered from: the changes between
        were claims' (usage, consumers, generations), which the usage read
        at that stamp holds, so the answer stands."""
        return (
            self.db is not None
            and refresh.structure_at(self.db, self.conn, seen) is self.catalog.structure
        )

    def class_ids(self, names: Iterable[str]) -> dict[str, int]:
        known = _known(self.catalog.class_ids, names)
        return known if known is not None else self._by_sql().class_ids(names)

    def trait_ids(self, names: Iterable[str]) -> dict[str, int]:
        known = _known(self.catalog.trait_ids, names)
        return known if known is not None else self._by_sql().trait_ids(names)

    def aggregate_ids(self, uuids: Iterable[str]) -> dict[str, int]:
        known = self.catalog.aggregate_ids
        return {uuid: known[uuid] for uuid in uuids if uuid in known}

    def root_of(self, provider_uuid: str) -> int:
        for spelling in stage.uuid_spellings(provider_uuid):
            rp = self.catalog.ids.get(spelling)
            if rp is not None:
                return self.catalog.providers[rp].root_id
        return self._by_sql().root_of(provider_uuid)

    def root_ids(self) -> list[int]:
        return self.catalog.roots

    def is_nested(self) -> bool:
        return self.catalog.nested

    def uuids(self, provider_ids: Iterable[int]) -> dict[int, str]:
        uuids = self.catalog.uuids
        return {rp: uuids[rp] for rp in provider_ids if rp in uuids}

    def sharing_holds(self, class_ids: Collection[int]) -> bool:
        by_provider = self.catalog.by_provider
        return any(
            rc in class_ids for rp in self._sharing for rc, _ in by_provider.get(rp, ())
        )

    def holders(
        self, class_ids: Collection[int], roots: list[int] | None
    ) -> tuple[dict[int, Provider], dict[Key, Inventory]]:
        catalog = self.catalog
        providers: dict[int, Provider] = {}
        inventories: dict[Key, Inventory] = {}
        if roots is None:
            for rc in class_ids:
                inventories.update(catalog.idle.get(rc, {}))
                providers.update(catalog.holders.get(rc, {}))
            return providers, inventories
        every, by_provider = catalog.providers, catalog.by_provider
        wanted = set(class_ids)
        for root in roots:
            for rp in catalog.members.get(root, ()):
                for rc, inventory in by_provider.get(rp, ()):
                    if rc in wanted:
                        inventories[rp, rc] = inventory
                        providers[rp] = every[rp]
        return providers, inventories

    def members(self, roots: Iterable[int]) -> dict[int, Provider]:
        every, members = self.catalog.providers, self.catalog.members
        return {rp: every[rp] for root in roots for rp in members.get(root, ())}

    def traits(
        self,
        wanted: Collection[int],
        providers: Mapping[int, Provider],
        roots: list[int] | None,
    ) -> dict[int, frozenset[int]]:
        catalog = self.catalog
        return _having(catalog.trait_holders, catalog.traits, wanted, providers)

    def aggregates(
        self,
        wanted: Collection[int],
        providers: Mapping[int, Provider],
        roots: list[int] | None,
    ) -> dict[int, frozenset[int]]:
        catalog = self.catalog
        return _having(catalog.aggregate_members, catalog.aggregates, wanted, providers)

    def sharing(self, providers: Mapping[int, Provider]) -> list[int]:
        return [rp for rp in self._sharing if rp in providers]

    def memberships(self, provider_ids: Collection[int]) -> dict[int, frozenset[int]]:
        aggregates = self.catalog.aggregates
        return {rp: aggregates[rp] for rp in provider_ids if rp in aggregates}

    def aggregate_roots(
        self, aggregate_ids: Collection[int]
    ) -> dict[int, frozenset[int]]:
        return {a: self.catalog.roots_of("aggregates", a) for a in aggregate_ids}

    def trait_roots(self, trait_ids: Collection[int]) -> dict[int, frozenset[int]]:
        return {t: self.catalog.roots_of("traits", t) for t in trait_ids}

    def usage(
        self,
        *,
        classes: Collection[int] | None = None,
        providers: Iterable[int] | None = None,
        trees: tuple[int, int] | None = None,
        roots: list[int] | None = None,
    ) -> dict[Key, int]:
        used = self.used
        if used is None:
            # The stamp comes with the first usage read (no round trip of
            # its own).
            stamp = self.confirm if self.unconfirmed and classes is not None else None
            return stage.usage(
                self.conn,
                classes=classes,
                providers=providers,
                trees=trees,
                roots=roots,
                stamp=stamp,
            )
        catalog = self.catalog
        if classes is None:
            if providers is None:
                raise TypeError("usage of classes or of providers")
            by_class = collections.defaultdict(list)
            by_provider = catalog.by_provider
            for rp in providers:
                for rc, _ in by_provider.get(rp, ()):
                    by_class[rc].append(rp)
            out: dict[Key, int] = {}
            for rc, rps in by_class.items():
                out.update(used.pairs((rc,), rps))
            return out
        if trees is not None:
            every = catalog.roots
            first = bisect.bisect_left(every, trees[0])
            roots = every[first : bisect.bisect_right(every, trees[1], first)]
        if roots is None:
            return used.pairs(classes)
        members = catalog.members
        return used.pairs(
            classes, [rp for root in roots for rp in members.get(root, ())]
        )

    def usage_columns(
        self, class_ids: tuple[int, ...], stock: Mapping[int, Any]
    ) -> dict[int, np.ndarray]:
        if self.used is None:
            return stage.usage_columns(self.conn, class_ids, stock)
        return {rc: self.used.column(rc, stock[rc].rp) for rc in class_ids}

    def tree_usage(
        self, class_ids: Sequence[int], roots: Sequence[int]
    ) -> dict[int, bytes] | None:
        used = self.used
        if used is None:
            return None
        if self.catalog.columns is None:
            return _tree_usage_by_members(self.catalog, used, class_ids, roots)
        columns = self.catalog.columns
        page = np.fromiter(roots, dtype=np.int64, count=len(roots))
        at = columns.positions(page)
        flat = columns.flat()
        if flat:
            rps = page  # each tree its root alone
        else:
            rps, sizes = columns.members(at)
        # A row per provider, tree after tree: its id, then its usage.
        table = np.empty((len(rps), 1 + len(class_ids)), dtype=np.int64)
        table[:, 0] = rps
        rest = []
        for column, rc in enumerate(class_ids, 1):
            stock = columns.stock.get(rc)
            if (
                flat
                and stock is not None
                and columns.per_tree(rc)
                and used.rp.get(rc) is stock.rp
            ):
                # One row per tree (its root), in roots' order: the
                # class's usage column is the trees' (no lookup by id).
                table[:, column] = used.amount[rc][at]
            else:
                rest.append((column, rc))
        if rest:
            table[:, [c for c, _ in rest]] = used.table([rc for _, rc in rest], rps)
        if flat:
            # A tree's bytes are its row's.
            row = np.dtype((np.void, table.itemsize * table.shape[1]))
            return dict(zip(roots, table.view(row).ravel().tolist()))
        blob = table.tobytes()
        ends = (np.cumsum(sizes) * table.itemsize * table.shape[1]).tolist()
        return dict(zip(roots, map(blob.__getitem__, map(slice, [0, *ends], ends))))

    def holding_trees(self, class_ids: Sequence[int], roots: Sequence[int]) -> list:
        """The roots of ``roots`` (the catalog's) whose trees hold
        inventory of some class of ``class_ids``, in the same order: from
        the columns, no provider looked at."""
        columns = catalog_columns.of(self.catalog)
        page = np.fromiter(roots, dtype=np.int64, count=len(roots))
        at = columns.positions(page)
        held = np.zeros(len(page), dtype=bool)
        for rc in class_ids:
            held |= columns.holds(rc)[at]
        return page[held].tolist()

    def root(self, rp: int) -> int:
        """The root id of the catalog's provider ``rp``."""
        return self.catalog.providers[rp].root_id

    def roots(self, rps: Collection[int]) -> set[int]:
        """The root ids of the catalog's providers ``rps``."""
        ids = np.fromiter(rps, dtype=np.int64, count=len(rps))
        return set(catalog_columns.of(self.catalog).roots_of(ids).tolist())

    def usage_table(
        self, class_ids: Sequence[int], rps: Sequence[int]
    ) -> np.ndarray | None:
        if self.used is None:
            return None
        ids = np.fromiter(rps, dtype=np.int64, count=len(rps))
        return self.used.table(class_ids, ids)

    def kept_answers(self, shape: Hashable) -> kept.Answers:
        return kept.Answers(self.catalog, shape)

    def idle_summaries(
        self,
        roots: Collection[int],
        requested: Mapping[int, str],
        known: Iterable[tuple[Key, Inventory]],
    ) -> dict[int, Idle]:
        # ``known`` holds this catalog's own inventories: not needed.
        derived = self.catalog.derived
        out: dict[int, Idle] = {}
        for root in roots:
            tree = derived(root)
            if tree.idle is None:
                tree.idle = self._idle_tree(root)
            out.update(tree.idle)
        return out

    def _idle_tree(self, root: int) -> dict[int, Idle]:
        catalog = self.catalog
        names, by_provider = catalog.class_names, catalog.by_provider
        members = {rp: catalog.providers[rp] for rp in catalog.members.get(root, ())}
        held = {
            rp: [(names[rc], rc, inventory) for rc, inventory in by_provider[rp]]
            for rp in members
            if rp in by_provider
        }
        trait_names = catalog.trait_names
        return stage.idle_entries(
            members,
            catalog.uuids,
            held,
            {rp: trait_names[rp] for rp in members if rp in trait_names},
        )


def _known(known, names):
    """{name: id} from ``known``, or None when some name is missing (the
    SQL lookup raises the not-found error)."""
    if not all(name in known for name in names):
        return None
    return {name: known[name] for name in names}


def _having(
    holders: Mapping[int, list[int]],
    values: Mapping[int, frozenset[int]],
    wanted: Collection[int],
    providers: Mapping[int, Provider],
) -> dict[int, frozenset[int]]:
    """{provider: frozenset of the ``wanted`` values it has} for
    ``providers`` (``holders``: {value: providers}, ``values`` its
    inversion): a set intersection per wanted value (usually one), or,
    where the values' holders outnumber the providers (a page of 1,000
    trees and a trait of 83,000 providers), a lookup per provider."""
    wanted = frozenset(wanted)
    if sum(len(holders.get(value, ())) for value in wanted) > len(providers):
        get = values.get
        return {
            rp: having
            for rp in providers
            if (had := get(rp)) is not None and (having := had & wanted)
        }
    into: dict[int, frozenset[int]] = {}
    for value in wanted:
        one = frozenset((value,))
        for rp in providers.keys() & holders.get(value, ()):
            had = into.get(rp)
            into[rp] = one if had is None else had | one
    return into


class Behind(Exception):
    """The catalog an unconfirmed index answered from is not at the stamp
    its transaction reads: answer again from ``index(db, conn, seen)``
    (``seen``: the look it read)."""

    def __init__(self, seen: changes.Look):
        super().__init__(seen.stamp)
        self.seen = seen


def index(
    db: db_api.Database,
    conn: sa.Connection,
    seen: changes.Look | None = None,
    shared: bool = False,
) -> stage.Index:
    """Stage 2's index for a request reading on ``conn``: the catalog's
    when it is on and current, else SQL's. ``seen``: the look the
    transaction has just read (read here otherwise). ``shared``: ``conn``
    is in autocommit (``Database.several_reads``), its looks told to the
    host's other workers (``refresh.current``)."""
    catalog = refresh.current(db, conn, seen, shared)
    if catalog is None:
        return sql.SqlIndex(conn)
    return CatalogIndex(conn, catalog, used=refresh.used_of(db, catalog))


def state(index: stage.Index) -> tuple[int, int] | None:
    """The (stamp, token sum) of the catalog ``index`` answers from,
    confirmed by its request's look, when its answers are the catalog's
    alone: usage from memory (which needs the triggers: every writer's
    writes move the stamp), no name read through SQL. What identifies the
    database's state those answers show; None otherwise."""
    if (
        not isinstance(index, CatalogIndex)
        or index.unconfirmed
        or index.used is None
        or index.read_sql
    ):
        return None
    return index.catalog.stamp, index.catalog.token_sum


def unconfirmed(db: db_api.Database, conn: sa.Connection) -> stage.Index:
    """For a read on ``conn`` in autocommit (``Database.several_reads``):
    ``index`` without its statement when the process holds a catalog
    needing no comparison with the database and likely current
    (``refresh.held``): answers from it are good once ``confirm``ed, by
    the stamp the request's first usage read reads too where usage is
    read through SQL (one round trip less), else after the answer, by a
    look of this request or one another worker of the host sent after
    this was made (``host_look``; none of its own); on ``Behind``, answer
    again from ``index``. Not after a write of this process committed
    since the host's last look (``refresh.wrote_since_look``: a claim's
    GET after its own PUT): that answer would be thrown away (the search
    twice, for the same statements), so ``index`` it is."""
    catalog = refresh.held(db)
    if catalog is None or refresh.wrote_since_look(db):
        return index(db, conn, shared=True)
    return CatalogIndex(
        conn, catalog, unconfirmed=True, db=db, used=refresh.used_of(db, catalog)
    )


def _tree_usage_by_members(
    catalog: Catalog,
    used: catalog_used.Used,
    class_ids: Sequence[int],
    roots: Sequence[int],
) -> dict[int, bytes]:
    """``CatalogIndex.tree_usage`` where the catalog's columns are not
    made: from the trees' member lists, the same bytes. A catalog that
    followed a change of structure has none until a request asks, and
    making them reads every provider: an idle worker's follower
    summarising the few trees a load just added (``warm``) paid that at
    every look, a cost per write that grew with the catalog (issue 45)."""
    members = catalog.members
    trees = [members.get(root, ()) for root in roots]
    sizes = [len(tree) for tree in trees]
    rps = np.fromiter(
        itertools.chain.from_iterable(trees), dtype=np.int64, count=sum(sizes)
    )
    table = np.empty((len(rps), 1 + len(class_ids)), dtype=np.int64)
    table[:, 0] = rps
    table[:, 1:] = used.table(list(class_ids), rps)
    blob = table.tobytes()
    ends = (np.cumsum(sizes, dtype=np.int64) * table.itemsize * table.shape[1]).tolist()
    return dict(zip(roots, map(blob.__getitem__, map(slice, [0, *ends], ends))))


WARM_TREES = 50  # trees an idle worker's follower summarises per look (about
# 2 ms of CPU at 9 providers a tree: what a request arriving meanwhile
# may wait)


def warm(db: db_api.Database) -> list[tree_summaries.Kept]:
    """Make the kept summaries (``tree_summaries``) of up to WARM_TREES
    trees of the held catalog that have none, from the usage in memory:
    what the next candidate request would make first. For an idle
    worker's follower (``cmd/follower.py``): each worker makes its own,
    and after a load the first request of each paid for every tree's.
    The summaries it made (none without a catalog, or usage in memory,
    or past the trees kept)."""
    catalog = refresh.held(db)
    if catalog is None or len(catalog.roots) > tree_summaries.TREES_KEPT:
        return []
    used = refresh.used_of(db, catalog)
    if used is None:
        return []
    derived = catalog.derived_by_tree.get
    roots = [
        root
        for root in catalog.roots
        if (tree := derived(root)) is None or tree.summaries is None
    ][:WARM_TREES]
    if not roots:
        return []
    # No connection: with the usage in memory the summaries read nothing
    # (a statement would fail rather than go unseen).
    made = tree_summaries.of_trees(CatalogIndex(None, catalog, used=used), roots)
    return made or []
