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
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import search
from placement.objects.allocation_candidates import trees
from placement.objects.drain import equivalent
from placement.objects.drain import holdings as holdings_mod
from placement.objects.drain import reasons
from placement.objects.drain import selection

RP = tables.resource_providers
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
        index = catalog_index.index(db, conn)
        return _Planner(conn, index, asked, roots, held).run()


def _drained(conn, asked):
    if asked.member_of is not None:
        return selection.roots_of_aggregate(conn, asked.member_of)
    named = list(asked.providers) if asked.providers else [asked.in_tree]
    return selection.roots_of_providers(conn, named)


class _Names:
    """An index whose class, trait and aggregate lookups of the names in
    ``requests`` were made once, in one lookup each (the SQL index runs
    a statement per lookup: not one per consumer)."""

    def __init__(self, index, requests):
        self.index = index
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

    def __getattr__(self, name):
        return getattr(self.index, name)


class _Shape:
    """The engine's plans of one request shape, by anchor, and the
    anchors in the strategy's order (a heap of (key, anchor, version);
    an entry whose version is not its anchor's current one is stale)."""

    def __init__(self, planner, groups):
        self.groups = groups
        self.plans = {p.anchor: p for p in planner.forest.plans(groups)}
        self.classes = sorted({rc for g in groups for rc, _ in g.resources})
        self.heap = [
            (planner.key(anchor, self.classes), anchor, planner.version.get(anchor, 0))
            for anchor in self.plans
        ]
        heapq.heapify(self.heap)
        self.full = set()  # anchors that cannot take this shape any more


class _Planner:
    def __init__(self, conn, index, asked, roots, held):
        self.conn = conn
        self.index = index
        self.asked = asked
        self.roots = roots
        self.held = held
        self.version: dict[int, int] = {}
        self.shapes: dict[tuple, _Shape] = {}

    def run(self):
        carried = self._carried_traits()
        requests = [
            equivalent.request_of(
                h, self.asked.required, self.asked.target_member_of, carried
            )
            for h in self.held
        ]
        self.index = _Names(self.index, requests)
        resolved = {}
        for request in dict.fromkeys(requests):
            try:
                resolved[request] = engine._resolve(self.index, request)
            except providers.NoCandidates as e:
                resolved[request] = e
        self._load(resolved)
        moves, unplaced = [], []
        for holding, request in zip(self.held, requests):
            found = resolved[request]
            placed = None
            if not isinstance(found, providers.NoCandidates):
                placed = self._place(found[0], request)
            if placed is None:
                unplaced.append((holding, request))
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
        """The snapshot, the forest of the trees not drained, and each
        tree's capacity and usage per class (the strategies' keys)."""
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
        self.snapshot = providers.load_snapshot(self.index, classes, traits, aggregates)
        snapshot = self.snapshot
        drained = set(self.roots)
        self.allowed = {p.root_id for p in snapshot.providers.values()} - drained
        self.forest = trees.Trees(snapshot, roots=self.allowed)
        self.capacity: dict[tuple[int, int], int] = {}
        self.used: dict[tuple[int, int], int] = {}
        every = snapshot.providers
        for (rp, rc), inventory in snapshot.inventories.items():
            key = (every[rp].root_id, rc)
            self.capacity[key] = self.capacity.get(key, 0) + inventory.capacity
            self.used[key] = self.used.get(key, 0) + inventory.used

    def key(self, anchor, classes):
        """Where a tree comes in the strategy's order for a shape asking
        ``classes``: by root id (first fit), least used first (spread),
        most used first (pack); used is the mean over those classes of
        the tree's used share of its capacity."""
        strategy = self.asked.strategy
        if strategy == "first":
            return (0.0, anchor)
        shares = [
            self.used[anchor, rc] / self.capacity[anchor, rc]
            for rc in classes
            if self.capacity.get((anchor, rc))
        ]
        share = sum(shares) / len(shares) if shares else 0.0
        return (share if strategy == "spread" else -share, anchor)

    def _place(self, groups, request):
        """(target root, {(provider, class): amount}) of one consumer, or
        None; the amounts are counted as usage from here on."""
        shape = self.shapes.get((tuple(groups), request.isolate))
        if shape is None:
            shape = self.shapes[tuple(groups), request.isolate] = _Shape(self, groups)
        walker = search.Search(
            self.forest, groups, request.same_subtree, request.isolate
        )
        heap = shape.heap
        while heap:
            _, anchor, version = heap[0]
            if anchor in shape.full or version != self.version.get(anchor, 0):
                heapq.heappop(heap)
                continue
            amounts = self._first_fit(walker, shape.plans[anchor])
            if amounts is None:
                heapq.heappop(heap)
                shape.full.add(anchor)
                continue
            self._count(amounts)
            return anchor, amounts
        return None

    def _first_fit(self, walker, plan_):
        """The first candidate of a tree that fits the plan's usage, as
        {(provider, class): amount}, or None."""
        inventories = self.snapshot.inventories
        for candidate in itertools.islice(walker.candidates(plan_), TRIED):
            amounts: dict[tuple[int, int], int] = {}
            for rp, rc, n in candidate.allocations:
                amounts[rp, rc] = amounts.get((rp, rc), 0) + n
            if all(inventories[key].fits_sum(n) for key, n in amounts.items()):
                return amounts
        return None

    def _count(self, amounts):
        """Count a move's amounts as usage: in the snapshot (the engine's
        filters and search read it) and in its trees' totals; the trees
        it touched come again in every shape's order at their new key."""
        snapshot = self.snapshot
        touched = set()
        for (rp, rc), n in amounts.items():
            inventory = snapshot.inventories[rp, rc]
            snapshot.inventories[rp, rc] = inventory._replace(used=inventory.used + n)
            snapshot.used[rp, rc] = snapshot.used.get((rp, rc), 0) + n
            root = snapshot.providers[rp].root_id
            self.used[root, rc] += n
            touched.add(root)
        for root in touched:
            version = self.version[root] = self.version.get(root, 0) + 1
            for shape in self.shapes.values():
                if root in shape.plans and root not in shape.full:
                    heapq.heappush(
                        shape.heap, (self.key(root, shape.classes), root, version)
                    )

    def _document(self, moves, unplaced, resolved):
        named = set(self.roots)
        for holding, _request, anchor, amounts in moves:
            named.add(anchor)
            named.update(rp for rp, _ in amounts)
            named.update(holding.kept())
        for holding, _request in unplaced:
            named.update(holding.roots[rp] for rp in holding.drained)
        for holding, *_ in moves:
            named.update(holding.roots[rp] for rp in holding.drained)
        names = _names(self.conn, named)
        explained = {}
        for _holding, request in unplaced:
            if request not in explained:
                found = resolved[request]
                explained[request] = (
                    reasons.explained(
                        self.conn, self.index, request, self.snapshot, self.allowed
                    )
                    if not isinstance(found, providers.NoCandidates)
                    else explain.unmatched(found)
                )
        return {
            "strategy": self.asked.strategy,
            "drained": [_provider(names, root) for root in self.roots],
            "moves": [
                dict(
                    _consumer(holding, request, names),
                    target=_provider(names, anchor),
                    allocations=self._allocations(holding, amounts, names),
                    kept=[names[rp][0] for rp in holding.kept()],
                )
                for holding, request, anchor, amounts in moves
            ],
            "unplaced": [
                dict(
                    _consumer(holding, request, names),
                    reason=explained[request]["reason"],
                    explain=explained[request],
                )
                for holding, request in unplaced
            ],
            "totals": {
                "consumers": len(self.held),
                "placed": len(moves),
                "left": len(unplaced),
            },
            "capacity_left": self._capacity_left(),
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
        """Per class the consumers ask for: capacity, usage (the plan's
        moves included) and what is free, over the trees not drained."""
        out: dict[str, dict] = {}
        for (root, rc), capacity in sorted(self.capacity.items()):
            if root not in self.allowed:
                continue
            entry = out.setdefault(
                self.class_names[rc], {"capacity": 0, "used": 0, "free": 0}
            )
            entry["capacity"] += capacity
            entry["used"] += self.used[root, rc]
            entry["free"] += max(capacity - self.used[root, rc], 0)
        return out


def _consumer(holding, request, names):
    return {
        "consumer": holding.uuid,
        "consumer_generation": holding.generation,
        "project_id": holding.project_id,
        "user_id": holding.user_id,
        "consumer_type": holding.consumer_type,
        "source": _provider(names, holding.roots[holding.drained[0]]),
        "query": equivalent.query_string(request),
    }


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
