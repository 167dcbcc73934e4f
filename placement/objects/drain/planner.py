"""The drain plan: each consumer of the drained trees placed, in turn,
by the allocation candidate engine's own stages over one snapshot of the
rest of the cloud, the plan's earlier moves counted as usage (two
consumers never get the same last slot). See doc/drain.md.

One read of the engine's snapshot for every class, trait and aggregate
the consumers' requests name (``providers.load_snapshot``, over the
catalog or SQL index); per request shape, the engine's plans of every
tree that is not drained (``trees.Trees.plans``: the per-group filters),
made when the first consumer of the shape comes and kept; per consumer,
the engine's search (``search.Search``) of the trees in the strategy's
order, each candidate judged against the usage the plan has reached.
Usage only grows as the plan goes on, so a tree that cannot take a shape
never takes it later: it leaves that shape's order for good.
"""

import bisect
import collections
import dataclasses
import heapq
import itertools

import sqlalchemy as sa

from placement.db import api as db_api
from placement.db import tables
from placement.objects import constraints
from placement.objects.allocation_candidates import answering as engine
from placement.objects.allocation_candidates import catalog_index
from placement.objects.allocation_candidates import explain
from placement.objects.allocation_candidates import order
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import search
from placement.objects.allocation_candidates import trees
from placement.objects.drain import equivalent
from placement.objects.drain import holdings as holdings_mod
from placement.objects.drain import reasons
from placement.objects.drain import selection

RP, ALLOC = tables.resource_providers, tables.allocations
# The cloud's usage of some classes (the drained trees' is taken away).
# MySQL: read from the (provider, class, used) index, which holds every
# column it needs, rather than the class index and a row per allocation
# (0.8 s instead of 1.7-3.8 s at 100,000 hosts on a busy machine).
USED_BY_CLASS = (
    sa.select(ALLOC.c.resource_class_id, sa.cast(sa.func.sum(ALLOC.c.used), sa.Integer))
    .with_hint(
        ALLOC, "FORCE INDEX (allocations_resource_provider_class_used_idx)", "mysql"
    )
    .where(ALLOC.c.resource_class_id.in_(db_api.int_list("classes")))
    .group_by(ALLOC.c.resource_class_id)
)
# Trees whose usage first fit reads at first (then twice as many as read
# so far, at most providers.CHUNK).
PAGE = 256
STRATEGIES = ("first", "spread", "pack")
# Candidates of one tree judged against the plan's usage before the tree
# counts as full for the consumer (the engine's plans were made at the
# usage of their time: some options may no longer fit).
TRIED = 1000


@dataclasses.dataclass(frozen=True)
class Asked:
    """What a drain plan is asked: the drained trees (the trees of
    ``providers``, of ``in_tree``, or of the members of the aggregate
    ``member_of``), the strategy, the traits a consumer keeps where its
    providers carry them and the aggregates targets must be in."""

    providers: tuple = ()
    in_tree: str | None = None
    member_of: str | None = None
    strategy: str = "first"
    required: constraints.RequiredTraits | None = None
    target_member_of: constraints.MemberOf | None = None


def plan(db: db_api.Database, asked: Asked) -> dict:
    """The plan document (doc/drain.md "The answer"); BadRequest for an
    unknown provider, TraitNotFound for an unknown trait."""
    with db.reader() as conn:
        roots = _drained(conn, asked)
        held = holdings_mod.read(conn, roots)
        facts = holdings_mod.kept_of(conn, held)
        index = catalog_index.index(db, conn)
        return _Planner(conn, index, asked, roots, held, facts, db.conf).run()


def _drained(conn, asked):
    if asked.member_of is not None:
        return selection.roots_of_aggregate(conn, asked.member_of)
    named = list(asked.providers) if asked.providers else [asked.in_tree]
    return selection.roots_of_providers(conn, named)


class _Names:
    """An index whose class, trait and aggregate lookups of the names in
    ``requests`` were made once, in one lookup each (the SQL index runs
    a statement per lookup: not one per consumer)."""

    def __init__(self, index, requests, roots=None):
        self.index = index
        self._roots = roots or {}  # provider uuid -> root id, known
        groups = [g for r in requests for g in r.groups]
        self._classes = index.class_ids({rc for g in groups for rc, _ in g.resources})
        self._traits = index.trait_ids(
            set().union(*(g.required.names for g in groups if g.required))
        )
        self._aggregates = index.aggregate_ids(
            set().union(
                *(
                    set().union(*g.any_aggregates, g.forbidden_aggregates)
                    for g in groups
                )
            )
        )

    def class_ids(self, names):
        return {name: self._classes[name] for name in names}

    def trait_ids(self, names):
        return {name: self._traits[name] for name in names}

    def aggregate_ids(self, uuids):
        return {u: self._aggregates[u] for u in uuids if u in self._aggregates}

    def root_of(self, provider_uuid):
        if provider_uuid in self._roots:
            return self._roots[provider_uuid]
        return self.index.root_of(provider_uuid)

    def __getattr__(self, name):
        return getattr(self.index, name)


class _Shape:
    """Where one request shape (its resolved groups) stands in the plan:
    first fit, the position before which every tree is full for it;
    spread and pack, its heap of (key, anchor, version) (an entry whose
    version is not its anchor's current one is stale)."""

    def __init__(self, groups, request):
        self.groups = groups
        self.same_subtree = request.same_subtree
        self.isolate = request.isolate
        self.classes = sorted({rc for g in groups for rc, _ in g.resources})
        self.position = 0
        self.heap: list | None = None
        self.full: set[int] = set()


class _Planner:
    def __init__(self, conn, index, asked, roots, held, facts, conf):
        self.conn = conn
        self.facts = facts
        self.conf = conf
        self.moved: dict[tuple[int, int], int] = {}  # (provider, class) ->
        # amount the plan moved there
        self.alone: set[int] = set()  # trees whose usage was read alone
        self.index = index
        self.asked = asked
        self.roots = roots
        self.held = held
        self.version: dict[int, int] = {}
        self.shapes: dict[tuple, _Shape] = {}
        self.planned: dict[int, int] = {}  # class id -> amount moved
        self.heaps: dict[tuple, list] = {}  # classes -> the first heap made

    def run(self):
        carried = self._carried_traits()
        keeps = [equivalent.keep_of(h, self.facts) for h in self.held]
        requests = [
            equivalent.request_of(
                h,
                self.asked.required,
                self.asked.target_member_of,
                carried,
                keep if not keep.refused else None,
            )
            for h, keep in zip(self.held, keeps)
        ]
        known = {k.root_uuid: k.root for k in self.facts.providers.values()}
        self.index = _Names(self.index, requests, known)
        resolved = {}
        for request, keep in zip(requests, keeps):
            if keep.refused or request in resolved:
                continue
            try:
                resolved[request] = engine._resolve(self.index, request)
            except providers.NoCandidates as e:
                resolved[request] = e
        self._load(resolved)
        moves, unplaced = [], []
        for holding, request, keep in zip(self.held, requests, keeps):
            found = resolved.get(request)
            placed = None
            if found is not None and not isinstance(found, providers.NoCandidates):
                placed = self._place(found[0], request, keep.anchor)
            if placed is None:
                unplaced.append((holding, request, keep))
            else:
                moves.append((holding, request, *placed))
        return self._document(moves, unplaced, resolved)

    def _carried_traits(self):
        """{drained provider id: the call's trait names it has}."""
        required = self.asked.required
        if not required:
            return {}
        ids = self.index.trait_ids(required.names)
        names = {i: n for n, i in ids.items()}
        members = {
            rp: providers.Provider(rp, h.parents[rp], h.roots[rp])
            for h in self.held
            for rp in h.drained
        }
        found = self.index.traits(set(ids.values()), members, None)
        return {rp: frozenset(names[t] for t in held) for rp, held in found.items()}

    def _load(self, resolved):
        """The engine's snapshot of every class, trait and aggregate the
        requests name, without usage; the trees not drained in root id
        order, each tree's providers and inventories. Usage is read for
        every tree at once for spread and pack (they order all trees by
        it) or with sharing providers (they serve trees anywhere), else
        page by page of trees as first fit reaches them."""
        classes, traits, aggregates = set(), set(), set()
        self.class_names = {}
        for found in resolved.values():
            if isinstance(found, providers.NoCandidates):
                continue
            _groups, class_ids, trait_ids, aggregate_ids = found
            classes.update(class_ids.values())
            traits.update(trait_ids.values())
            aggregates.update(aggregate_ids)
            self.class_names.update({i: n for n, i in class_ids.items()})
        self.classes = classes
        self.snapshot = snapshot = providers.load_snapshot(
            self.index, classes, traits, aggregates, read_usage=False
        )
        drained = set(self.roots)
        every = snapshot.providers
        # Providers below each root (most trees are one root alone).
        self.below: dict[int, list[int]] = collections.defaultdict(list)
        roots = []
        for rp, provider in every.items():
            if provider.parent_id is None:
                roots.append(rp)
            else:
                self.below[provider.root_id].append(rp)
        self.sharing = [
            rp for rp in snapshot.serves if every[rp].root_id not in drained
        ]
        self.sharing_roots = {every[rp].root_id for rp in self.sharing}
        self.allowed = set(roots) - drained
        self.order = sorted(self.allowed)
        self.loaded = 0  # trees of ``order`` whose usage is read
        self.sums: dict | None = None  # (root, class) -> [capacity, used]
        if self.asked.strategy != "first" or snapshot.serves:
            self._read_usage(None)
            self.loaded = len(self.order)

    def _read_usage(self, trees_):
        """Read the usage of the trees whose root ids are within
        ``trees_`` (all when None); the plan's own moves stay counted."""
        used = self.index.usage(classes=self.classes, trees=trees_)
        moved = self.moved
        if moved:
            used = {key: n + moved.get(key, 0) for key, n in used.items()}
        providers._with_usage(self.snapshot.inventories, used)

    def _next_page(self):
        """Read the usage of the next page of trees (first fit): twice as
        many as read so far, PAGE at first, at most CHUNK."""
        size = min(max(PAGE, self.loaded), providers.CHUNK)
        page = self.order[self.loaded : self.loaded + size]
        self._read_usage((page[0], page[-1]))
        self.loaded += len(page)

    def _tree(self, anchor):
        """The snapshot of one tree (and the sharing providers), its
        usage as the plan has it."""
        snapshot = self.snapshot
        members = [anchor, *self.below.get(anchor, ()), *self.sharing]
        inventories = snapshot.inventories
        return providers.Snapshot(
            providers={rp: snapshot.providers[rp] for rp in members},
            inventories={
                (rp, rc): inventories[rp, rc]
                for rp in members
                for rc in self.classes
                if (rp, rc) in inventories
            },
            used={},
            traits={rp: snapshot.traits[rp] for rp in members if rp in snapshot.traits},
            aggregates={
                rp: snapshot.aggregates[rp]
                for rp in members
                if rp in snapshot.aggregates
            },
            serves={rp: snapshot.serves[rp] for rp in self.sharing},
            nested=snapshot.nested,
        )

    def _try(self, shape, anchor):
        """The amounts of the engine's first candidate under ``anchor``
        for ``shape``, {(provider, class): amount}, or None."""
        # The sharing providers' trees are the forest's too (a provider
        # serves only under the roots the forest holds), but only
        # ``anchor``'s plan is judged.
        forest = trees.Trees(self._tree(anchor), roots={anchor, *self.sharing_roots})
        plans = [p for p in forest.plans(shape.groups) if p.anchor == anchor]
        if not plans:
            return None
        walker = search.Search(forest, shape.groups, shape.same_subtree, shape.isolate)
        inventories = self.snapshot.inventories
        for candidate in itertools.islice(walker.candidates(plans[0]), TRIED):
            amounts: dict[tuple[int, int], int] = {}
            for rp, rc, n in candidate.allocations:
                amounts[rp, rc] = amounts.get((rp, rc), 0) + n
            if all(inventories[key].fits_sum(n) for key, n in amounts.items()):
                return amounts
        return None

    def _place(self, groups, request, anchor=None):
        """(target root, {(provider, class): amount}) of one consumer, or
        None; the amounts are counted as usage from here on. ``anchor``:
        the one tree it may go to (the tree it keeps allocations in)."""
        key = (tuple(groups), request.same_subtree, request.isolate)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = _Shape(groups, request)
        if anchor is not None:
            found = self._anchored(shape, anchor)
        elif self.asked.strategy == "first":
            found = self._first(shape)
        else:
            found = self._ordered(shape)
        if found is not None:
            self._count(found[1])
        return found

    def _anchored(self, shape, anchor):
        """The consumer's own kept tree, whatever the strategy: its usage
        read alone first when first fit's pages have not reached it."""
        if anchor not in self.allowed:
            return None
        if self.loaded < len(self.order) and anchor not in self.alone:
            if bisect.bisect_left(self.order, anchor) >= self.loaded:
                self._read_usage((anchor, anchor))
            self.alone.add(anchor)
        amounts = self._try(shape, anchor)
        return None if amounts is None else (anchor, amounts)

    def _first(self, shape):
        """First fit: the first tree in root id order that takes it."""
        i = shape.position
        while True:
            if i >= self.loaded:
                if self.loaded == len(self.order):
                    shape.position = i
                    return None
                self._next_page()
            anchor = self.order[i]
            amounts = self._try(shape, anchor)
            if amounts is not None:
                shape.position = i
                return anchor, amounts
            i += 1

    def _ordered(self, shape):
        """Spread or pack: the first tree in the shape's order of usage
        that takes it; a tree that does not leaves the order for good."""
        if shape.heap is None:
            shape.heap = self._heap(shape.classes)
        heap = shape.heap
        while heap:
            _, anchor, version = heap[0]
            if anchor in shape.full or version != self.version.get(anchor, 0):
                heapq.heappop(heap)
                continue
            amounts = self._try(shape, anchor)
            if amounts is not None:
                return anchor, amounts
            heapq.heappop(heap)
            shape.full.add(anchor)
        return None

    def _heap(self, classes):
        """A new heap of every tree for a shape asking ``classes``: a copy
        of the first one made for those classes (shapes of one flavor
        family share them), with the trees moved into since at their
        current key."""
        classes = tuple(classes)
        made = self.heaps.get(classes)
        if made is None:
            made = self.heaps[classes] = [
                (self.key(anchor, classes), anchor, self.version.get(anchor, 0))
                for anchor in self.order
            ]
            heapq.heapify(made)
            return list(made)
        heap = list(made)
        for anchor, version in self.version.items():
            heapq.heappush(heap, (self.key(anchor, classes), anchor, version))
        return heap

    def key(self, anchor, classes):
        """Where a tree comes in the order of a shape asking ``classes``:
        the candidate engine's (allocation_candidates/order.py)."""
        if self.sums is None:
            self.sums = order.tree_sums(self.snapshot)
        return order.key(self.asked.strategy, self.sums, anchor, classes)

    def _count(self, amounts):
        """Count a move's amounts as usage: in the snapshot (the engine's
        filters and search read it) and in its trees' totals; the trees
        it touched come again in every ordered shape at their new key."""
        snapshot = self.snapshot
        touched = set()
        for (rp, rc), n in amounts.items():
            inventory = snapshot.inventories[rp, rc]
            snapshot.inventories[rp, rc] = inventory._replace(used=inventory.used + n)
            self.moved[rp, rc] = self.moved.get((rp, rc), 0) + n
            self.planned[rc] = self.planned.get(rc, 0) + n
            root = snapshot.providers[rp].root_id
            if self.sums is not None:
                self.sums[root, rc][1] += n
            touched.add(root)
        for root in touched:
            version = self.version[root] = self.version.get(root, 0) + 1
            for shape in self.shapes.values():
                if shape.heap is not None and root not in shape.full:
                    heapq.heappush(
                        shape.heap, (self.key(root, shape.classes), root, version)
                    )

    def _document(self, moves, unplaced, resolved):
        named = set(self.roots)
        for holding, _request, anchor, amounts in moves:
            named.add(anchor)
            named.update(rp for rp, _ in amounts)
            named.update(holding.kept())
        for holding, _request, _keep in unplaced:
            named.update(holding.roots[rp] for rp in holding.drained)
        for holding, *_ in moves:
            named.update(holding.roots[rp] for rp in holding.drained)
        names = _names(self.conn, named)
        explained = {}
        for _holding, request, keep in unplaced:
            key = (request, keep)
            if key in explained:
                continue
            found = resolved.get(request)
            if keep.refused:
                explained[key] = reasons.refused(keep.refused)
            elif isinstance(found, providers.NoCandidates):
                explained[key] = explain.unmatched(found)
            else:
                # A consumer anchored to the tree it keeps is judged there
                # (and, unless in_tree keeps it in its tree, on the sharing
                # providers that may serve it).
                allowed = self.allowed
                if keep.anchor is not None:
                    allowed = (
                        {keep.anchor}
                        if keep.in_tree
                        else ({keep.anchor} | self.sharing_roots)
                    )
                    allowed &= self.allowed
                explained[key] = reasons.explained(
                    self.conn, self.index, request, self.snapshot, allowed
                )
        return {
            "strategy": self.asked.strategy,
            "drained": [_provider(names, root) for root in self.roots],
            "moves": [
                dict(
                    self._consumer(holding, request, names),
                    target=_provider(names, anchor),
                    allocations=self._allocations(holding, amounts, names),
                    kept=[names[rp][0] for rp in holding.kept()],
                )
                for holding, request, anchor, amounts in moves
            ],
            "unplaced": [
                dict(
                    self._consumer(holding, request, names),
                    reason=explained[request, keep]["reason"],
                    explain=explained[request, keep],
                )
                for holding, request, keep in unplaced
            ],
            "totals": {
                "consumers": len(self.held),
                "placed": len(moves),
                "left": len(unplaced),
            },
            "capacity_left": self._capacity_left(),
        }

    def _consumer(self, holding, request, names):
        """The consumer's part of a move or an unplaced entry. One without
        a consumers row gets the owner ``placement-manage db
        online_data_migrations`` would give it ([placement]
        incomplete_consumer_project_id and _user_id) and a null
        generation: the move's PUT creates its row. So does one whose
        project or user row is gone (the audit's missing_owners), for
        that id: the move's PUT then records that owner."""
        project, user = holding.project_id, holding.user_id
        if holding.missing or project is None:
            project = self.conf.placement.incomplete_consumer_project_id
        if holding.missing or user is None:
            user = self.conf.placement.incomplete_consumer_user_id
        return {
            "consumer": holding.uuid,
            "consumer_generation": holding.generation,
            "project_id": project,
            "user_id": user,
            "consumer_type": holding.consumer_type,
            "source": _provider(names, holding.roots[holding.drained[0]]),
            "query": equivalent.query_string(request),
        }

    def _allocations(self, holding, amounts, names):
        """The consumer's whole allocation after the move: the planned
        amounts in the target tree and its allocations outside the
        drained trees, kept."""
        out: dict[str, dict] = {}
        for (rp, rc), n in sorted(amounts.items()):
            resources = out.setdefault(names[rp][0], {"resources": {}})["resources"]
            name = self.class_names[rc]
            resources[name] = resources.get(name, 0) + n
        for rp in holding.kept():
            resources = out.setdefault(names[rp][0], {"resources": {}})["resources"]
            for name, n in holding.allocations[rp].items():
                resources[name] = resources.get(name, 0) + n
        return out

    def _capacity_left(self):
        """Per class the consumers ask for, over the trees not drained:
        capacity, usage with the plan's moves, and what is free. Usage
        is the snapshot's when the plan read every tree's (spread, pack,
        a first fit that went through the cloud); else the cloud's (one
        grouped statement) less the drained trees' (every allocation
        there is a drained consumer's) plus the plan's moves."""
        if not self.classes:
            return {}
        inventories = self.snapshot.inventories
        capacity = dict.fromkeys(self.classes, 0)
        used = dict.fromkeys(self.classes, 0)
        for (_rp, rc), inventory in inventories.items():
            # Inventory.capacity, without a call per inventory.
            total, reserved, ratio, _, _, _, in_use = inventory
            capacity[rc] += int((total - reserved) * ratio)
            used[rc] += in_use
        for root in self.roots:
            for rp in (root, *self.below.get(root, ())):
                for rc in self.classes:
                    if (rp, rc) in inventories:
                        capacity[rc] -= inventories[rp, rc].capacity
                        used[rc] -= inventories[rp, rc].used
        if self.loaded < len(self.order):
            used = self._used_elsewhere()
        out = {}
        for rc in sorted(self.classes, key=self.class_names.get):
            out[self.class_names[rc]] = {
                "capacity": capacity[rc],
                "used": used[rc],
                "free": capacity[rc] - used[rc],
            }
        return out

    def _used_elsewhere(self):
        """{class: usage of the trees not drained, the plan's moves
        included}, from the cloud's usage by class."""
        used = dict.fromkeys(self.classes, 0)
        used.update(
            self.conn.execute(USED_BY_CLASS, {"classes": sorted(self.classes)}).all()
        )
        ids = {n: i for i, n in self.class_names.items()}
        for holding in self.held:
            for rp in holding.drained:
                for name, n in holding.allocations[rp].items():
                    if name in ids:
                        used[ids[name]] -= n
        for rc, n in self.planned.items():
            used[rc] += n
        return used


def _provider(names, rp):
    uuid, name = names[rp]
    return {"uuid": uuid, "name": name}


def _names(conn, ids):
    """{provider id: (uuid, name)} of ``ids``."""
    found = {}
    for chunk in providers.chunks(ids):
        found.update(
            (rp, (uuid, name))
            for rp, uuid, name in conn.execute(
                sa.select(RP.c.id, RP.c.uuid, RP.c.name).where(
                    RP.c.id.in_(db_api.int_list("ids"))
                ),
                {"ids": chunk},
            )
        )
    return found
