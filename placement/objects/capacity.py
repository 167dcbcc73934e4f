"""How many more instances of one allocation candidate request fit, per
root provider, per aggregate and in total (GET
/allocation_candidates/capacity, the capacity gauges, ``placement-manage
capacity``; see doc/capacity.md).

One group of resources without filters or sharing providers, over a
current catalog, is answered in vector operations on the catalog's
columns (``_columnar``, catalog/columns.py): every holder of a class then
counts, so no plan is needed. Any other request is scanned.

A scan, not an enumeration: the candidate engine's own stages 2 and 3
(``providers.load_snapshot`` over the catalog or SQL index, then
``trees.Trees.plans``) say which providers may serve each slot of the
request under each root, with today's usage; each provider's headroom
then says how many more amounts of a slot it takes. Where every claim of
the request takes one provider per slot, independently of the other
slots, the count is exact:

- one slot (one group; or the unsuffixed group on a flat deployment, one
  provider holding every class): the sum over its providers of how many
  times the group's amounts fit on each;
- the unsuffixed group alone on trees (one slot per class, any provider of
  the tree for each, traits only forbidden): the smallest, over its
  classes, of the sum over that class's providers of how many times the
  amount fits.

Everything else (several groups, sharing providers, the unsuffixed group's
required traits judged on its providers together, one provider per tree
below 1.29) is an upper bound, marked ``exact: false``; each root it
names is confirmed to take at least one instance by the engine's search.
"""

import collections
import dataclasses
import math
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping
from collections.abc import Sequence

import numpy as np
import orjson
import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.allocation_candidates import answering as engine
from placement.objects.allocation_candidates import catalog_index
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import request as ac_request
from placement.objects.allocation_candidates import search
from placement.objects.allocation_candidates import trees
from placement.objects.catalog import columns as catalog_columns

RP, AGG = tables.resource_providers, tables.placement_aggregates


@dataclasses.dataclass
class Capacity:
    capacity: int
    # {uuid, name, count, limited_by (class names)}, by count (largest
    # first), then name: a list, or the columns' Roots
    roots: Sequence[dict]
    aggregates: dict  # aggregate uuid -> total count of its roots
    exact: bool

    def as_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "roots": list(self.roots),
            "aggregates": self.aggregates,
            "exact": self.exact,
        }

    def as_json(self, dumps: Callable[[object], bytes]) -> bytes:
        """``as_dict`` as compact JSON, by ``dumps`` (any object to
        JSON bytes); the columns' roots written straight from their
        heads, without an object per root."""
        if not isinstance(self.roots, Roots):
            return dumps(self.as_dict())
        rest = dumps({"aggregates": self.aggregates, "exact": self.exact})
        return b"".join(
            (
                b'{"capacity":%d,"roots":[' % self.capacity,
                self.roots.entries(),
                b"],",
                memoryview(rest)[1:],
            )
        )


class Roots(Sequence):
    """The roots of a columnar answer: ``shown`` (positions in the
    columns' roots, in the answer's order), their ``counts``, and per
    root the key in ``limited_by`` ({key: class names}) of its limits."""

    def __init__(self, catalog, columns, shown, counts, keys, limited_by):
        self.catalog, self.columns = catalog, columns
        self.shown, self.counts, self.keys = shown, counts, keys
        self.limited_by = limited_by
        self._listed: list | None = None

    def __len__(self) -> int:
        return len(self.shown)

    def __getitem__(self, i):
        return self._list()[i]

    def _list(self) -> list:
        if self._listed is None:
            uuids, names = self.catalog.uuids, self.catalog.names
            self._listed = [
                {
                    "uuid": uuids[rp],
                    "name": names[rp],
                    "count": n,
                    "limited_by": list(self.limited_by[k]),
                }
                for rp, n, k in zip(
                    self.columns.roots[self.shown].tolist(),
                    self.counts.tolist(),
                    self.keys.tolist(),
                )
            ]
        return self._listed

    def entries(self) -> memoryview:
        """The roots' entries in JSON, comma-separated (the answer's
        array without its brackets), from the columns' heads: per root
        its head's row and the tail of its (count, limits), one row of
        the answer each, joined without their NUL padding (a few passes
        over the answer's bytes, no object per root)."""
        # Each (count, limits) once: counts by their rank among the
        # counts (a count itself may be near 2**62).
        kinds = max(self.limited_by) + 1
        counts, rank = _distinct(self.counts)
        tails, which = _distinct(rank * kinds + self.keys)
        counts = counts.tolist()
        tail_rows = catalog_columns.padded(
            [
                b'%d,"limited_by":%s},'
                % (counts[t // kinds], orjson.dumps(self.limited_by[t % kinds]))
                for t in tails.tolist()
            ]
        )
        heads = self.columns.heads
        width = heads.shape[1] + tail_rows.shape[1]
        # The rows written in place in a bytearray (its translate then
        # reads them without a copy); mode="clip" (the positions are in
        # range) writes them without an intermediate buffer.
        answer = bytearray(len(self.shown) * width)
        rows = np.frombuffer(answer, dtype=np.uint8).reshape(len(self.shown), width)
        np.take(heads, self.shown, axis=0, out=rows[:, : heads.shape[1]], mode="clip")
        np.take(tail_rows, which, axis=0, out=rows[:, heads.shape[1] :], mode="clip")
        return memoryview(answer.translate(None, b"\0"))[:-1]


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``, by a table of the
    values where they are small (an answer's counts and tails: a few
    hundred values over 100,000 roots): two passes, no sort."""
    if not len(values) or values.min() < 0 or values.max() >= _TABLE_MAX:
        return np.unique(values, return_inverse=True)
    present = np.zeros(int(values.max()) + 1, dtype=bool)
    present[values] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present), rank[values]


# Values below this are ranked by a table (_distinct): 8 MB at most.
_TABLE_MAX = 2**20

EMPTY = Capacity(0, [], {}, True)


def fits(inventory: providers.Inventory, amount: int) -> float:
    """How many more allocations of ``amount`` the inventory takes, one
    after the other (each must ``fit``); inf for no amount."""
    if amount == 0:
        return math.inf
    if not inventory.min_unit <= amount <= inventory.max_unit:
        return 0
    if amount % inventory.step_size:
        return 0
    limit = (inventory.total - inventory.reserved) * inventory.allocation_ratio
    n = max(int((limit - inventory.used) // amount), 0)
    # The float division may be off by one either way at the edge.
    while inventory.used + (n + 1) * amount <= limit:
        n += 1
    while n and inventory.used + n * amount > limit:
        n -= 1
    return n


def compute(
    db: db_api.Database,
    request: ac_request.Request,
    options: engine.Options,
) -> Capacity:
    """The capacity of a checked ``request.Request`` (its limit ignored);
    ResourceClassNotFound or TraitNotFound for unknown names."""
    with db.reader() as conn:
        index = catalog_index.index(db, conn)
        try:
            whole = _columnar(index, request, options)
            if whole is not None:
                return whole
            return _Scan(index, request, options).run()
        except providers.NoCandidates:
            return EMPTY


# The columns are int64: a larger amount (the API takes any size) would
# overflow them, and fits nowhere anyway.
_COLUMN_MAX = 2**62


def _columnar(index, request, options):
    """The capacity in vector operations over the catalog's columns
    (catalog/columns.py), for one group of resources without filters or
    sharing providers on a current catalog: every provider holding a
    class counts, so no plan is needed. None for any other request (the
    engine's plans answer it, ``_Scan``)."""
    catalog = getattr(index, "catalog", None)
    if catalog is None or request.same_subtree:
        return None
    if request.root_required or request.root_forbidden or len(request.groups) != 1:
        return None
    groups, class_ids, _, _ = engine._resolve(index, request)
    group = groups[0]
    if not group.resources or not all(0 < a < _COLUMN_MAX for _, a in group.resources):
        return None  # amounts past int64 are the engine's (Python ints)
    if group.any_traits or group.forbidden_traits or group.in_tree_root is not None:
        return None
    if group.any_aggregates or group.forbidden_aggregates:
        return None
    if index.sharing_holds(class_ids.values()):
        return None
    one_per_tree = catalog.nested and not options.nested_aware
    if group.spread and one_per_tree and len(group.resources) > 1:
        return None  # a bound: the engine's search confirms each root
    columns = catalog_columns.of(catalog)
    wanted = tuple(sorted(class_ids.values()))
    fitting = []  # (class, Stock, fits per row)
    if any(rc not in columns.stock for rc in wanted):
        return EMPTY
    if any(columns.stock[rc].big for rc in wanted):
        return None  # counts past int64: the engine's (Python ints)
    used = index.usage_columns(wanted, columns.stock)
    for rc, amount in group.resources:
        stock = columns.stock[rc]
        fitting.append((rc, stock, catalog_columns.fits(stock, used[rc], amount)))
    count, tie = (_spread if group.spread else _single)(fitting, len(columns.roots))
    return _answer(catalog, columns, [rc for rc, _, _ in fitting], count, tie)


def _per_root(roots, values, size):
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, roots, values)
    return out


def _spread(fitting, size):
    """The unsuffixed group: per root, per class the sum over the tree's
    providers of how many times the amount fits; the count is the least
    of them, limited by the classes at it."""
    sums = np.vstack([_per_root(s.root, n, size) for _, s, n in fitting])
    count = sums.min(axis=0)
    return count, sums == count


def _single(fitting, size):
    """One suffixed group: per provider holding every class, the least
    over its classes of how many times the amount fits, summed per root;
    limited by the classes at the least on any provider counted."""
    common = fitting[0][1].rp
    for _, stock, _ in fitting[1:]:
        common = np.intersect1d(common, stock.rp, assume_unique=True)
    per_class = np.vstack(
        [n[np.searchsorted(stock.rp, common)] for _, stock, n in fitting]
    )
    least = per_class.min(axis=0)
    first = fitting[0][1]
    roots = first.root[np.searchsorted(first.rp, common)]
    tie = (per_class == least) & (least > 0)
    return _per_root(roots, least, size), np.vstack(
        [_per_root(roots, t, size) > 0 for t in tie]
    )


def _answer(catalog, columns, classes, count, tie):
    """The Capacity of ``count`` per root (columns' order) and ``tie``
    (per class, per root: the class limits it)."""
    shown = _by_count(count, columns.by_name)
    if not len(shown):
        return EMPTY
    bits = np.zeros(len(shown), dtype=np.int64)
    for i, limits in enumerate(tie):
        bits |= limits[shown].astype(np.int64) << i
    names = catalog.class_names
    limited_by = {
        b: sorted(names[rc] for i, rc in enumerate(classes) if b >> i & 1)
        for b in np.unique(bits).tolist()
    }
    counts = count[shown]
    by_member = count[columns.member]
    held = by_member > 0
    totals = _per_root(
        columns.aggregate[held], by_member[held], len(columns.aggregate_uuids)
    )
    return Capacity(
        capacity=int(counts.sum()),
        roots=Roots(catalog, columns, shown, counts, bits, limited_by),
        aggregates={
            columns.aggregate_uuids[a]: int(totals[a])
            for a in np.flatnonzero(totals).tolist()
        },
        exact=True,
    )


def _by_count(count, by_name):
    """Positions of the roots whose ``count`` is above 0, by count
    (largest first) then name: a stable sort of the counts in name
    order (a radix sort when they fit in 16 bits)."""
    named = count[by_name]
    if named.max(initial=0) < 2**15:
        named = named.astype(np.int16)
    order = np.argsort(-named, kind="stable")
    return by_name[order[: np.count_nonzero(named > 0)]]


class _Scan:
    def __init__(self, index, request, options):
        self.index = index
        self.request = request
        self.options = options
        # Hosts alike have equal inventories: (Inventory, amount) -> fits.
        self.memo = {}

    def run(self):
        request, index = self.request, self.index
        groups, class_ids, trait_ids, aggregate_ids = engine._resolve(index, request)
        self.class_names = {i: n for n, i in class_ids.items()}
        snapshot = providers.load_snapshot(
            index,
            class_ids.values(),
            set(trait_ids.values()),
            aggregate_ids,
            whole_trees=bool(request.same_subtree)
            or not all(g.resources for g in groups),
        )
        forest = trees.Trees(
            snapshot,
            frozenset(trait_ids[t] for t in request.root_required),
            frozenset(trait_ids[t] for t in request.root_forbidden),
        )
        plans = forest.plans(groups)
        one_per_tree = not self.options.nested_aware and snapshot.nested
        slots = plans[0].slots if plans else ()
        shared = bool(snapshot.serves)
        single = len(groups) == 1 and not request.same_subtree
        exact = (
            single
            and not shared
            and not (
                any(s.spread for s in slots)
                and (groups[0].any_traits or (one_per_tree and len(slots) > 1))
            )
            and all(g.resources for g in groups)
        )
        engine_search = None
        if not exact:
            engine_search = search.Search(
                forest, groups, request.same_subtree, request.isolate
            )
        counts = {}
        for plan in plans:
            count, limited_by = self._count(plan, groups, snapshot.inventories)
            if not count:
                continue
            if engine_search is not None and not _one_found(
                engine_search, plan, forest, one_per_tree
            ):
                continue
            counts[plan.anchor] = (count, limited_by)
        total = sum(c for c, _ in counts.values())
        if shared:
            total = min(total, _pooled(plans, groups, snapshot.inventories)[0])
        names = _root_names(index, counts)
        class_names = self.class_names
        roots = sorted(
            (
                {
                    "uuid": names[rp][0],
                    "name": names[rp][1],
                    "count": count,
                    "limited_by": sorted(class_names[rc] for rc in limited_by),
                }
                for rp, (count, limited_by) in counts.items()
            ),
            key=lambda r: (-r["count"], r["name"], r["uuid"]),
        )
        return Capacity(
            capacity=total,
            roots=roots,
            aggregates=_aggregates(index, {rp: c for rp, (c, _) in counts.items()}),
            exact=exact,
        )

    def _count(self, plan, groups, inventories):
        """(count, limiting class ids) under one anchor: exact for the
        exact shapes (see the module's text), else an upper bound."""
        per_slot = []
        memo = self.memo
        for options in plan.options:
            if not options or not options[0][1]:
                continue  # resourceless: bounds nothing
            count, limiting = 0, set()
            for rp, asked in options:
                least, classes = math.inf, ()
                for rc, amount in asked:
                    inventory = inventories[rp, rc]
                    n = memo.get((inventory, amount))
                    if n is None:
                        n = memo[inventory, amount] = fits(inventory, amount)
                    if n < least:
                        least, classes = n, (rc,)
                    elif n == least:
                        classes += (rc,)
                count += least
                limiting.update(classes)
            per_slot.append((count, limiting))
        if not per_slot:
            return 1, set()  # only resourceless groups: one is all we know
        count = min(c for c, _ in per_slot)
        limited_by = set().union(*(lim for c, lim in per_slot if c == count))
        if len(per_slot) > 1:
            pooled, limits = _pooled([plan], groups, inventories)
            if pooled < count:
                count, limited_by = pooled, limits
        return int(count), limited_by


def _pooled(plans, groups, inventories):
    """(bound, limiting class ids): per class, the free units of every
    provider that could serve it in ``plans`` over what one instance asks
    of it. An upper bound: each instance takes that much of those
    providers together."""
    demand = collections.Counter()
    for group in groups:
        for rc, amount in group.resources:
            demand[rc] += amount
    free = collections.Counter()
    counted = set()
    for plan in plans:
        for options in plan.options:
            for rp, asked in options:
                for rc, _ in asked:
                    if (rp, rc) not in counted:
                        counted.add((rp, rc))
                        inventory = inventories[rp, rc]
                        free[rc] += max(inventory.capacity - inventory.used, 0)
    bounds = {rc: free[rc] // amount for rc, amount in demand.items() if amount}
    if not bounds:
        return math.inf, set()
    least = min(bounds.values())
    return least, {rc for rc, n in bounds.items() if n == least}


def _one_found(engine_search, plan, forest, one_per_tree):
    """The engine's search finds at least one candidate under the anchor
    (below 1.29 on trees: one using one provider per tree)."""
    for candidate in engine_search.candidates(plan):
        rps = candidate.providers()
        if not one_per_tree or len({forest.root(rp) for rp in rps}) == len(rps):
            return True
    return False


def _root_names(
    index: providers.Index, roots: Collection[int]
) -> dict[int, tuple[str, str]]:
    """{root: (uuid, name)}: from the catalog when the index is on it."""
    cached = getattr(index, "catalog", None)
    if cached is not None:
        return {rp: (cached.uuids[rp], cached.names[rp]) for rp in roots}
    found: dict[int, tuple[str, str]] = {}
    for chunk in providers.chunks(roots):
        found.update(
            (rp, (uuid, name))
            for rp, uuid, name in index.conn.execute(
                sa.select(RP.c.id, RP.c.uuid, RP.c.name).where(
                    RP.c.id.in_(sa.bindparam("ids", expanding=True))
                ),
                {"ids": chunk},
            )
        )
    return found


def _aggregates(index: providers.Index, counts: Mapping[int, int]) -> dict[str, int]:
    """{aggregate uuid: total count} over the aggregates of the roots."""
    if not counts:
        return {}
    totals: collections.Counter = collections.Counter()
    for rp, aggregates in index.memberships(counts).items():
        for aggregate in aggregates:
            totals[aggregate] += counts[rp]
    if not totals:
        return {}
    catalog = getattr(index, "catalog", None)
    if catalog is not None:
        uuids = {i: u for u, i in catalog.aggregate_ids.items() if i in totals}
    else:
        uuids = dict(
            index.conn.execute(
                sa.select(AGG.c.id, AGG.c.uuid).where(
                    AGG.c.id.in_(sa.bindparam("ids", expanding=True))
                ),
                {"ids": sorted(totals)},
            ).all()
        )
    return {uuids[a]: n for a, n in sorted(totals.items()) if a in uuids}
