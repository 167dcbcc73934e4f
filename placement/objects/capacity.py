"""How many more instances of one allocation candidate request fit, per
root provider, per aggregate and in total (GET
/allocation_candidates/capacity, the capacity gauges, ``placement-manage
capacity``; see doc/capacity.md).

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
from collections.abc import Collection
from collections.abc import Mapping

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects.allocation_candidates import answering as engine
from placement.objects.allocation_candidates import catalog_index
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import request as ac_request
from placement.objects.allocation_candidates import search
from placement.objects.allocation_candidates import trees

RP, AGG = tables.resource_providers, tables.placement_aggregates


@dataclasses.dataclass
class Capacity:
    capacity: int
    roots: list  # {uuid, name, count, limited_by (class names)}, by
    # count (largest first), then name
    aggregates: dict  # aggregate uuid -> total count of its roots
    exact: bool

    def as_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "roots": self.roots,
            "aggregates": self.aggregates,
            "exact": self.exact,
        }


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
            return _Scan(index, request, options).run()
        except providers.NoCandidates:
            return EMPTY


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
    uuids: dict[int, str] = dict(
        index.conn.execute(
            sa.select(AGG.c.id, AGG.c.uuid).where(
                AGG.c.id.in_(sa.bindparam("ids", expanding=True))
            ),
            {"ids": sorted(totals)},
        ).all()
    )
    return {uuids[a]: n for a, n in sorted(totals.items()) if a in uuids}
