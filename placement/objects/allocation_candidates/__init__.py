"""The allocation candidate engine (GET /allocation_candidates).

Stages, one module each: ``request`` (groups and structural rules),
``providers`` (all SQL), ``trees`` (who can serve which group under which
anchor), ``search`` (lazy combinations) and ``render`` (JSON per
microversion); ``catalog`` answers stage 2 from a per-worker cache while it
is current. ``find`` runs stages 2-4 in one read transaction.
"""
import dataclasses
import functools
import itertools
import random

from placement.objects.allocation_candidates import catalog
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import search
from placement.objects.allocation_candidates import trees


@dataclasses.dataclass(frozen=True)
class Options:
    nested_aware: bool = True        # 1.29+: one request may use many
                                     # providers of one tree
    strategy: str = "depth-first"
    max_candidates: int = -1         # generation cap, -1 unlimited
    randomize: bool = False


@dataclasses.dataclass
class Result:
    candidates: list            # search.Candidate
    summaries: dict             # provider id -> providers.Summary
    uuids: dict                 # provider id -> uuid
    class_names: dict           # class id -> name (requested classes)


EMPTY = Result([], {}, {}, {})
FIRST_PAGE = 16         # trees read first by a limited search (at least
                        # twice the limit)


def find(db, request, options=Options()):
    """Allocation candidates for a checked ``request.Request``."""
    with db.reader() as conn:
        source = catalog.reader(db, conn) or providers.Reader(conn)
        try:
            return _find(source, request, options)
        except providers.NoCandidates:
            return EMPTY


def _resolve(source, request):
    """Names to ids, in the contract's order; TraitNotFound or
    ResourceClassNotFound for unknown names."""
    trait_ids = source.trait_ids(request.root_required
                                 | request.root_forbidden)
    groups, aggregate_ids, class_ids = [], set(), {}
    for group in request.groups:
        classes = source.class_ids([name for name, _ in group.resources])
        class_ids.update(classes)
        member_of = group.member_of
        known = source.aggregate_ids(set().union(
            *group.any_aggregates, group.forbidden_aggregates))
        any_aggs = tuple(frozenset(known[u] for u in any_of if u in known)
                         for any_of in group.any_aggregates)
        traits = source.trait_ids(
            group.required.names if group.required else ())
        trait_ids.update(traits)
        groups.append(trees.Group(
            suffix=group.suffix,
            resources=tuple((classes[n], a) for n, a in group.resources),
            any_traits=tuple(frozenset(traits[t] for t in any_of)
                             for any_of in group.any_traits),
            forbidden_traits=frozenset(traits[t]
                                       for t in group.forbidden_traits),
            any_aggregates=any_aggs,
            forbidden_aggregates=frozenset(
                known[u] for u in group.forbidden_aggregates if u in known),
            in_tree_root=(source.root_of(group.in_tree)
                          if group.in_tree else None)))
        aggregate_ids.update(known.values())
        # An any-of set naming only unknown aggregates matches nothing.
        if member_of and not all(any_aggs):
            raise providers.NoCandidates()
    return groups, class_ids, trait_ids, aggregate_ids


def _find(source, request, options):
    groups, class_ids, trait_ids, aggregate_ids = _resolve(source, request)
    load = functools.partial(
        source.snapshot, class_ids.values(),
        set(trait_ids.values()), aggregate_ids,
        whole_trees=bool(request.same_subtree)
        or not all(g.resources for g in groups))
    paged = (request.limit is not None and not options.randomize
             and not source.sharing_holds(class_ids.values()))
    if paged:
        snapshots = (load(roots=page) for page in
                     _pages(source.root_ids(), request.limit))
    else:
        snapshots = [load()]
    seen = _Seen()
    found = search.STRATEGIES[options.strategy](
        _streams(snapshots, groups, request, trait_ids, seen))
    if not paged and snapshots[0].serves:
        # Only a sharing provider can put one candidate under two anchors:
        # within an anchor every choice differs in allocations or mappings.
        found = search.unique(found)
    if options.max_candidates > 0:
        found = itertools.islice(found, options.max_candidates)
    one_per_tree = not options.nested_aware and source.is_nested()
    if one_per_tree:
        found = (c for c in found if _one_provider_per_tree(c, seen))
    found = _limit(found, request.limit, options.randomize)
    return _with_summaries(source, found, seen, class_ids, one_per_tree)


def _pages(roots, limit):
    """Trees in ascending root id pages, growing: a limited search reads
    only as many trees as it needs (no sharing providers: each anchor's
    candidates come from its own tree)."""
    start, size = 0, max(FIRST_PAGE, 2 * limit)
    while start < len(roots):
        yield roots[start:start + size]
        start += size
        size = min(2 * size, providers.CHUNK)


class _Seen:
    """What the snapshots (pages) read so far know."""

    def __init__(self):
        self.snapshots = []

    def root(self, rp):
        for snapshot in self.snapshots:
            if rp in snapshot.providers:
                return snapshot.providers[rp].root_id
        raise KeyError(rp)

    def inventories(self, roots):
        """((provider, class), Inventory) of requested classes in ``roots``."""
        for snapshot in self.snapshots:
            providers_ = snapshot.providers
            for key, inventory in snapshot.inventories.items():
                if providers_[key[0]].root_id in roots:
                    yield key, inventory


def _streams(snapshots, groups, request, trait_ids, seen):
    """One lazy candidate stream per anchor, in anchor order."""
    root_required = frozenset(trait_ids[t] for t in request.root_required)
    root_forbidden = frozenset(trait_ids[t] for t in request.root_forbidden)
    for snapshot in snapshots:
        seen.snapshots.append(snapshot)
        forest = trees.Trees(snapshot, root_required, root_forbidden)
        engine = search.Search(forest, groups, request.same_subtree,
                               request.isolate)
        for plan in forest.plans(groups):
            yield engine.candidates(plan)


def _one_provider_per_tree(candidate, seen):
    """Below 1.29 a nested deployment allows one provider per tree (§5.8)."""
    rps = candidate.providers()
    return len({seen.root(rp) for rp in rps}) == len(rps)


def _limit(found, limit, randomize):
    if not randomize:
        return list(itertools.islice(found, limit))
    found = list(found)
    if limit is not None and len(found) > limit:
        return random.sample(found, limit)
    random.shuffle(found)
    return found


def _with_summaries(source, found, seen, class_ids, allocated_only):
    allocated = {rp for c in found for rp, _, _ in c.allocations}
    roots = {seen.root(rp) for rp in allocated}
    class_names = {i: n for n, i in class_ids.items()}
    summaries = source.summaries(
        roots, seen.inventories(roots), class_names,
        allocated if allocated_only else None)
    uuids = {rp: s.uuid for rp, s in summaries.items()}
    # Resourceless groups may map providers outside the summarised trees.
    mapped = {rp for c in found for _, rps in c.mappings for rp in rps}
    if not mapped <= uuids.keys():
        uuids.update(source.uuids(mapped - uuids.keys()))
    return Result(found, summaries, uuids, class_names)
