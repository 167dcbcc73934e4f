"""The engine's front door: ``answer`` runs stages 2-4 (``providers``,
``trees``, ``search``) for a checked request in one read transaction and
returns a Result or a Stream, which the candidates handler renders
(handlers/candidates/render). Also here, what decides how an answer is
built: the visit order, a limited search's pages (and the first page it
learns), the answer bound, and the providers' summaries at the end.
"""

import bisect
import contextlib
import dataclasses
import functools
import itertools
import math
import random
import typing
from collections.abc import Iterator
from typing import Any

from placement import exception
from placement.db import api as db_api
from placement.objects.allocation_candidates import catalog_index
from placement.objects.allocation_candidates import kept
from placement.objects.allocation_candidates import order as tree_order
from placement.objects.allocation_candidates import providers
from placement.objects.allocation_candidates import request as ac_request
from placement.objects.allocation_candidates import search
from placement.objects.allocation_candidates import tree_summaries
from placement.objects.allocation_candidates import trees
from placement.objects.catalog import refresh


@dataclasses.dataclass(frozen=True)
class Options:
    nested_aware: bool = True  # 1.29+: one request may use many
    # providers of one tree
    strategy: str = "depth-first"  # or breadth-first, or
    # depth-first-unless-limit (see visit_order)
    max_candidates: int = -1  # generation cap, -1 unlimited
    randomize: bool = False
    max_answer: int = 0  # most candidates one answer may hold, 0 unbounded
    order: str = "id"  # the trees' order (order.ORDERS)
    order_age: float = 0.0  # seconds a ranking of the trees is used


@dataclasses.dataclass
class Result:
    candidates: list  # search.Candidate
    summaries: dict  # provider id -> providers.Summary
    uuids: dict  # provider id -> uuid
    class_names: dict  # class id -> name (requested classes)
    # The summaries by tree (tree_summaries.Kept, with their JSON), where
    # kept so: the same as ``summaries``
    trees: list | None = None


EMPTY = Result([], {}, {}, {})
FIRST_PAGE = 16  # trees read first by a limited search beyond its
# limit (or beyond the trees the last request of its shape needed): most
# trees give one candidate in the first round
NARROWED = 2  # a limited search reads only the trees holding the traits,
# aggregates or in_tree it names when they are at most 1/NARROWED of all
KEPT = 10_000  # candidates an answer without a limit keeps while it is
# counted against Options.max_answer: smaller answers are searched once


@typing.overload
def answer(
    db: db_api.Database,
    request: ac_request.Request,
    options: Options,
    search: typing.Literal[True] = ...,
) -> "Result | Stream": ...


@typing.overload
def answer(
    db: db_api.Database,
    request: ac_request.Request,
    options: Options,
    search: typing.Literal[False],
) -> "Stream | None": ...


def answer(
    db: db_api.Database,
    request: ac_request.Request,
    options: Options,
    search: bool = True,
) -> "Result | Stream | None":
    """The answer to ``request``, the one place that decides how it is
    built: without a limit it can be millions of candidates, so it is a
    Stream written as they are found; a limit or a random order needs them
    all first (a Result, small or bounded by the limit). ``search`` False:
    the Stream not started (``Stream``'s ``search``), or None where the
    answer is not one (nothing is read then)."""
    if request.limit is None and not options.randomize:
        return Stream(db, request, options, search=search)
    if not search:
        return None
    return find(db, request, options)


def visit_order(options: Options, limit: int | None) -> str:
    """The order anchors are visited in. depth-first-unless-limit is
    depth-first for the max_candidates cap, but a request's limit without
    that cap takes its candidates from as many roots as possible."""
    if options.strategy == "depth-first-unless-limit":
        if limit is not None and options.max_candidates < 0:
            return "breadth-first"
        return "depth-first"
    return options.strategy


def find(
    db: db_api.Database, request: ac_request.Request, options: Options = Options()
) -> Result:
    """Allocation candidates for a checked ``request.Request``."""
    with db.several_reads() as conn:
        index = catalog_index.unconfirmed(db, conn)
        try:
            try:
                found = _answer(index, request, options)
            except exception.PlacementException:
                index.confirm()  # an error of an older catalog is none
                raise
            index.confirm()
            return found
        except catalog_index.Behind as behind:
            refresh.found_behind(db)
            return _answer(
                catalog_index.index(db, conn, behind.seen, shared=True),
                request,
                options,
            )


def _answer(index, request, options):
    try:
        return _find(index, request, options)
    except providers.NoCandidates:
        return EMPTY


def _resolve(index, request):
    """Names to ids, in upstream's order (it decides which unknown name is
    reported); TraitNotFound or
    ResourceClassNotFound for unknown names."""
    trait_ids = index.trait_ids(request.root_required | request.root_forbidden)
    groups, aggregate_ids, class_ids = [], set(), {}
    for group in request.groups:
        classes = index.class_ids([name for name, _ in group.resources])
        class_ids.update(classes)
        member_of = group.member_of
        known = index.aggregate_ids(
            set().union(*group.any_aggregates, group.forbidden_aggregates)
        )
        any_aggs = tuple(
            frozenset(known[u] for u in any_of if u in known)
            for any_of in group.any_aggregates
        )
        traits = index.trait_ids(group.required.names if group.required else ())
        trait_ids.update(traits)
        groups.append(
            trees.Group(
                suffix=group.suffix,
                resources=tuple((classes[n], a) for n, a in group.resources),
                any_traits=tuple(
                    frozenset(traits[t] for t in any_of) for any_of in group.any_traits
                ),
                forbidden_traits=frozenset(traits[t] for t in group.forbidden_traits),
                any_aggregates=any_aggs,
                forbidden_aggregates=frozenset(
                    known[u] for u in group.forbidden_aggregates if u in known
                ),
                in_tree_root=_root_of(index, group),
            )
        )
        aggregate_ids.update(known.values())
        # An any-of set naming only unknown aggregates matches nothing.
        if member_of and not all(any_aggs):
            raise providers.NoCandidates(group.suffix, "member_of")
    return groups, class_ids, trait_ids, aggregate_ids


def _root_of(index, group):
    if not group.in_tree:
        return None
    try:
        return index.root_of(group.in_tree)
    except providers.NoCandidates:
        raise providers.NoCandidates(group.suffix, "in_tree")


class Stream:
    """Allocation candidates as the search finds them, then the summaries
    of the providers they used: memory follows the providers involved, not
    the number of candidates. For requests without a limit or randomised
    order (those need every candidate first). Names are resolved, and
    their errors raised, when it is made (``search`` False: by
    ``start``, once the caller has seen ``state``). It holds its
    connection (``Database.several_reads``) until it is left as a context
    manager (``with stream:``), which also stops the search; an error
    while it is made gives it back there (it may be lost)."""

    def __init__(
        self,
        db: db_api.Database,
        request: ac_request.Request,
        options: Options,
        search: bool = True,
    ) -> None:
        self._connection = contextlib.ExitStack()
        conn = self._connection.enter_context(db.several_reads())
        self._request, self._options = request, options
        try:
            self._index = catalog_index.index(db, conn, shared=True)
        except BaseException as e:
            self._connection.__exit__(type(e), e, e.__traceback__)
            raise
        if search:
            self.start()

    def state(self) -> tuple[int, int] | None:
        """The database's state (``catalog_index.state``) its answer
        shows, when it is the catalog's alone."""
        return catalog_index.state(self._index)

    def start(self) -> None:
        """Start the search (resolving the names: their errors here)."""
        request, options = self._request, self._options
        try:
            try:
                search_ = _bounded(
                    functools.partial(_search, self._index, request, options),
                    options.max_answer,
                )
            except providers.NoCandidates:
                search_ = (iter(()), _Seen(), {}, False)
            self._found, self._seen, self._class_ids, self._one_per_tree = search_
        except BaseException as e:
            self._connection.__exit__(type(e), e, e.__traceback__)
            raise
        self.allocated: set[int] = set()
        self.mapped: set[int] = set()
        # Without a resourceless group every mapped provider allocates.
        self._maps_others = not all(g.resources for g in request.groups)
        self.count = 0
        self.class_names = {i: n for n, i in self._class_ids.items()}

    def batches(
        self, size: int
    ) -> Iterator[tuple[list[search.Candidate], dict[int, str]]]:
        """The candidates in lists of at most ``size``, each with the {id:
        uuid} of the providers it names that no list before it named
        (one lookup per list)."""
        while True:
            batch = list(itertools.islice(self._found, size))
            if not batch:
                return
            allocated = {rp for c in batch for rp, _, _ in c.allocations}
            fresh = allocated - self.allocated
            if self._maps_others:
                mapped = {rp for c in batch for _, rps in c.mappings for rp in rps}
                fresh = (fresh | mapped) - self.mapped
                self.mapped |= mapped
            self.allocated |= allocated
            self.count += len(batch)
            yield batch, self._index.uuids(fresh)

    def summaries(self) -> Result:
        """A Result with no candidates: the summaries of the providers the
        candidates used, once they are all out."""
        return _summaries(
            self._index,
            (),
            self._seen,
            self._class_ids,
            self._one_per_tree,
            self.allocated,
            self.mapped,
        )

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc_info: Any) -> bool | None:
        self._found = iter(())
        return self._connection.__exit__(*exc_info)


def _find(index, request, options):
    limit, bound = request.limit, options.max_answer
    if limit is not None and limit <= bound and not options.randomize:
        bound = 0  # the limit keeps the answer within the bound
    found, seen, class_ids, one_per_tree = _bounded(
        functools.partial(_search, index, request, options), bound
    )
    found = _limit(found, limit, options.randomize)
    allocated = None
    if seen.whole or one_per_tree:
        allocated = {rp for c in found for rp, _, _ in c.allocations}
    if seen.whole:
        roots = seen.roots(allocated)
    elif seen.streamed is not None and not one_per_tree:
        # Every stream given held a candidate, and the next stream was
        # asked for only once the answer took one from the last: the
        # answer's trees are the streams' (no pass over its candidates,
        # scattered in memory where the trees are ranked).
        roots = set(seen.streamed)
    else:
        # Paged, so no sharing provider: a candidate's providers all lie
        # in its anchor's tree, which its first allocation names.
        roots = seen.roots({c.allocations[0][0] for c in found})
    if seen.paging is not None:
        _learn_first_page(found, roots, seen, limit)
    if all(g.resources for g in request.groups):
        # Every mapped provider allocates; paged, all are in the
        # summarised trees.
        mapped = set() if allocated is None else allocated
    else:
        mapped = {rp for c in found for _, rps in c.mappings for rp in rps}
    return _summaries(
        index, found, seen, class_ids, one_per_tree, allocated, mapped, roots
    )


def _search(index, request, options, build=True):
    """(candidates, lazily, in answer order before any limit; what the
    snapshots read; {class name: id}; whether one provider per tree).
    ``build`` False: as many candidates, some of them None (to count)."""
    groups, class_ids, trait_ids, aggregate_ids = _resolve(index, request)
    load = functools.partial(
        providers.load_snapshot,
        index,
        class_ids.values(),
        set(trait_ids.values()),
        aggregate_ids,
        whole_trees=bool(request.same_subtree) or not all(g.resources for g in groups),
    )
    root_required = frozenset(trait_ids[t] for t in request.root_required)
    root_forbidden = frozenset(trait_ids[t] for t in request.root_forbidden)
    # Everything besides the trees' rows and usage that decides what an
    # anchor holds.
    shape = (
        tuple(groups),
        tuple(map(tuple, request.same_subtree)),
        request.isolate,
        root_required,
        root_forbidden,
        load.keywords["whole_trees"],
        index.is_nested(),
    )
    answers = index.kept_answers(shape)
    paged = (
        request.limit is not None
        and not options.randomize
        and not index.sharing_holds(class_ids.values())
    )
    seen = _Seen(whole=not paged)
    positions = None  # {root: place} of a snapshot's trees: None by id
    if options.order != "id":
        positions = functools.partial(
            tree_order.positions, options.order, classes=list(class_ids.values())
        )
    if paged:
        roots, sparse = _anchor_roots(index, groups, root_required)
    ranked = None
    if paged and options.order != "id":
        ranked = _ranked(
            index, groups, roots if sparse else None, options, class_ids.values()
        )
        paged = ranked is not None
        seen.whole = not paged
    one_per_tree = not options.nested_aware and index.is_nested()
    # Pages whose trees' usage the kept path takes from the catalog's
    # memory: read into the inventories only for the trees searched afresh.
    memory = None
    if paged and (build or one_per_tree) and getattr(index, "used", None) is not None:
        memory = _Memory(index, class_ids.values(), load)
        seen.root_of, seen.roots_of = index.root, index.roots
        seen.usage = memory.usage
    if ranked is not None:
        # Each page in its trees' order at the usage it reads: the
        # ranking's own where it was made at that usage; a kept one's
        # made at an older usage in memory ordered again at the usage now
        # from the columns (reading it would search every tree afresh).
        pages = tree_order.pages(ranked, request.limit + FIRST_PAGE)
        current = getattr(index, "used", None)
        in_order = ranked.usage is not None and ranked.usage is current
        if not in_order:
            ordered = _ordered_now(index, groups, options, class_ids.values())
            if ordered is not None:
                pages, in_order = map(ordered, pages), True
        if in_order:
            placed = (
                (page, None)
                if memory
                else (load(roots=sorted(page), sparse=True), _places(page))
                for page in pages
            )
        else:
            memory = None  # ordered by the usage the pages read
            seen.root_of = seen.roots_of = seen.usage = None
            placed = _placed(
                (load(roots=sorted(page), sparse=True) for page in pages), positions
            )
    elif paged:
        first = request.limit
        if answers is not None:
            seen.paging = (roots, answers)
            first = max(first, answers.trees_needed())
        placed = (
            (page if memory else load(roots=page, sparse=sparse), None)
            for page in _pages(roots, first, request.limit, seen)
        )
    else:
        snapshots = [load()]
        placed = _placed(snapshots, positions)
    # Only a sharing provider's repeats, or one provider per tree, need
    # the candidates themselves to tell which ones count.
    if one_per_tree or (not paged and snapshots[0].serves):
        build = True
    found = search.STRATEGIES[visit_order(options, request.limit)](
        _streams(
            placed,
            functools.partial(
                trees.Trees, root_required=root_required, root_forbidden=root_forbidden
            ),
            functools.partial(
                search.Search,
                groups=groups,
                same_subtree=request.same_subtree,
                isolate=request.isolate,
                build=build,
            ),
            groups,
            answers if build else None,
            seen,
            memory,
        )
    )
    if not paged and snapshots[0].serves:
        # Only a sharing provider can put one candidate under two anchors:
        # within an anchor every choice differs in allocations or mappings.
        found = search.unique(found, snapshots[0].serves)
    if options.max_candidates > 0:
        found = itertools.islice(found, options.max_candidates)
    if one_per_tree:
        found = (c for c in found if _one_provider_per_tree(c, seen))
    return found, seen, class_ids, one_per_tree


def _ranked(index, groups, roots, options, classes):
    """The trees in the order of ``options`` (order.ranked) from the
    catalog's columns; None without a catalog (SQL's index) or where they
    cannot judge: the search then reads every tree and orders their
    plans."""
    catalog = getattr(index, "catalog", None)
    amounts = [resource for group in groups for resource in group.resources]
    if catalog is None or not amounts:
        return None
    return tree_order.ranked(
        catalog, index, options.order, amounts, roots, options.order_age, list(classes)
    )


def _ordered_now(index, groups, options, classes):
    """order.ordered_now for ``_ranked``'s request."""
    amounts = [resource for group in groups for resource in group.resources]
    return tree_order.ordered_now(
        index.catalog, index, options.order, amounts, list(classes)
    )


def _anchor_roots(index, groups, root_required):
    """(the root ids, ascending, whose trees a paged search reads; whether
    some are left out). Without sharing providers a candidate's providers
    are all in its anchor's tree, so that tree holds, for every any-of set
    of required traits or member_of aggregates of every group, a provider
    with one of them, and is the ``in_tree`` of a group with resources.
    When those trees are at most half of all (an aggregate of 500 hosts
    in 100,000), only they are read: paging through the others would read
    every tree's usage to find nothing."""
    roots = index.root_ids()
    traits = [frozenset((t,)) for t in root_required]
    aggregates = []
    anchors = None
    for group in groups:
        traits.extend(group.any_traits)
        aggregates.extend(group.any_aggregates)
        if group.in_tree_root is not None and group.resources:
            tree = {group.in_tree_root}
            anchors = tree if anchors is None else anchors & tree
    for any_of, roots_of in itertools.chain(
        _roots_of(index.trait_roots, traits),
        _roots_of(index.aggregate_roots, aggregates),
    ):
        holding = set().union(*[roots_of[value] for value in any_of])
        anchors = holding if anchors is None else anchors & holding
    if anchors is None or len(anchors) * NARROWED > len(roots):
        return roots, False
    return sorted(anchors), True


def _roots_of(lookup, sets):
    """(set, {value: root ids}) for each of ``sets``, from one ``lookup``
    of every value they name."""
    if not sets:
        return []
    roots_of = lookup(set().union(*sets))
    return [(any_of, roots_of) for any_of in sets]


def _pages(roots, first, limit, seen):
    """Trees in ascending root id pages, growing from ``first`` (and a
    few more): a limited search reads only as many trees as it needs (no
    sharing providers: each anchor's candidates come from its own tree).
    A page is twice the last, or, once the trees read have given some
    anchors (``seen.anchors``) but fewer than ``limit``, as many trees as
    give the rest at the rate seen so far, with a quarter more: where a
    forbidden trait leaves out a third of the trees, the second page is
    the half they call for, not twice the first (each tree of a page is
    planned)."""
    start, size = 0, first + FIRST_PAGE
    while start < len(roots):
        yield roots[start : start + size]
        start += size
        size = min(2 * size, providers.CHUNK)
        if 0 < seen.anchors < limit:
            rest = (limit - seen.anchors) * start / seen.anchors
            size = min(size, math.ceil(1.25 * rest) + FIRST_PAGE)


class _Seen:
    """What the snapshots (pages) read so far know."""

    def __init__(self, whole=True):
        self.snapshots = []
        self.whole = whole  # one snapshot of every tree, not pages
        self.anchors = 0  # anchors planned or with kept candidates so far
        self.planned = 0  # at most how many candidates the plans of the
        # snapshots read so far (and the kept answers taken) can give
        self.paging = None  # (every root id, kept.Answers) of a paged
        # search that learns its first page for the next of its shape
        self.root_of = None  # root id of a provider of a tree whose
        # candidates were kept and not read (``_Memory``)
        self.roots_of = None  # the same for a set of providers, as a set
        self.usage = None  # {root: its usage of every class} of the trees
        # the kept path looked at, where it asks every class (``_Memory``)
        self.streamed = []  # root ids of the trees whose candidates were
        # given as streams, each holding some (``_kept_streams``); None
        # once a stream of a plan, maybe empty, was

    def most(self):
        """At most how many candidates the search gives, once known: a
        search of one snapshot has planned it all by its first candidate;
        None for pages (later ones are not planned yet) or before."""
        return self.planned if self.whole and self.snapshots else None

    def roots(self, rps):
        """The set of the root ids of providers ``rps`` (a set)."""
        out = set()
        for snapshot in self.snapshots:
            providers_ = snapshot.providers
            within = rps & providers_.keys()
            out.update([providers_[rp].root_id for rp in within])
            rps = rps - within
        if rps:
            out.update(self.roots_of(rps) if self.roots_of else map(self.root, rps))
        return out

    def root(self, rp):
        for snapshot in self.snapshots:
            if rp in snapshot.providers:
                return snapshot.providers[rp].root_id
        if self.root_of is not None:
            return self.root_of(rp)
        raise KeyError(rp)

    def inventories(self, roots):
        """((provider, class), Inventory) of requested classes in ``roots``."""
        for snapshot in self.snapshots:
            providers_ = snapshot.providers
            for key, inventory in snapshot.inventories.items():
                if providers_[key[0]].root_id in roots:
                    yield key, inventory

    def used(self, roots):
        """((provider, class), used) of requested classes in ``roots``."""
        out = []
        for snapshot in self.snapshots:
            get = snapshot.providers.get
            out += [
                item
                for item in snapshot.used.items()
                if (provider := get(item[0][0])) is not None
                and provider.root_id in roots
            ]
        return out


def _placed(snapshots, positions):
    """(snapshot, ``positions(snapshot)`` or None without ``positions``)."""
    for snapshot in snapshots:
        yield snapshot, None if positions is None else positions(snapshot)


def _places(page):
    """{root: its place} of a page of trees in their order."""
    return {root: i for i, root in enumerate(page)}


class _Memory:
    """A paged search's trees where the catalog holds their usage: a page
    is taken by its root ids; which of its trees hold a requested class
    and their usage come from the columns (``Index.holding_trees``,
    ``tree_usage``), and only the trees whose candidates are not kept are
    read (``load``, their usage put into their inventories)."""

    def __init__(self, index, class_ids, load):
        self.index = index
        self.class_ids = tuple(sorted(class_ids))
        self.load = load
        # Where the request asks every class the catalog holds usage of,
        # its trees' usage is their summaries' too (``tree_summaries``):
        # kept for them, not made again.
        every = self.class_ids == tuple(sorted(index.used.rp))
        self.usage = {} if every else None

    def anchors(self, page):
        return self.index.holding_trees(self.class_ids, page)

    def trees(self, roots):
        """{root: kept.Usage} of ``roots``."""
        usage = self.index.tree_usage(self.class_ids, roots)
        if self.usage is not None:
            self.usage.update(usage)
        return usage


def _streams(placed, forest_of, engine_of, groups, kept_answers, seen, memory=None):
    """One lazy candidate stream per anchor, in anchor order: of each
    (snapshot, {root: place} or None), by place, or by root id without.
    ``memory``: a ``_Memory``, where each is (a page's root ids in their
    order, None) instead (the kept path, its trees read as needed)."""
    for snapshot, places in placed:
        place = None if places is None else places.__getitem__
        if memory is not None:
            # A page's trees in their order already (ranked, or by id).
            roots = memory.anchors(snapshot)
            yield from _kept_streams(
                roots,
                memory.trees(roots),
                lambda roots: _read(memory.load, sorted(roots), forest_of, seen),
                engine_of,
                groups,
                kept_answers,
                seen,
            )
            continue
        seen.snapshots.append(snapshot)
        if kept_answers is None or snapshot.serves:
            forest = forest_of(snapshot)
            engine = engine_of(forest)
            plans = forest.plans(groups)
            if place is not None:
                plans.sort(key=lambda plan: place(plan.anchor))
            seen.planned += _most(plans)
            seen.anchors += len(plans)
            seen.streamed = None
            for plan in plans:
                yield engine.candidates(plan)
        else:
            roots = sorted(
                (rp for rp, p in snapshot.providers.items() if p.parent_id is None),
                key=place,
            )
            yield from _kept_streams(
                roots,
                kept_answers.usage(snapshot, roots),
                functools.partial(forest_of, snapshot),
                engine_of,
                groups,
                kept_answers,
                seen,
            )


def _read(load, roots, forest_of, seen):
    """The forest of the trees of ``roots``, read (with their usage)."""
    snapshot = load(roots=roots, sparse=True)
    seen.snapshots.append(snapshot)
    return forest_of(snapshot)


def _most(plans):
    """At most how many candidates ``plans`` give: one option per slot,
    before any constraint between slots."""
    return sum(math.prod(map(len, plan.options)) for plan in plans)


def _kept_streams(roots, usage, forest_of, engine_of, groups, kept_answers, seen):
    """``_streams`` of the trees of ``roots`` (in their order), without
    sharing providers, at ``usage`` ({root: kept.Usage}): each anchor's
    candidates are taken from what an earlier request of the same shape
    kept for its tree at the same usage, or found and, when few, kept
    (``kept``). ``forest_of(roots)``: the Trees of the trees of those
    roots. Paged, the trees not kept are read once the search reaches
    one: those before the last kept tree at once, the ones after it when
    reached (a page's last trees, read beyond its limit in case some
    give none, mostly are not)."""
    found = {}
    last = -1  # the place of the last tree kept
    for at, root in enumerate(roots):
        candidates = kept_answers.get(root, usage[root])
        if candidates is not None:
            found[root] = candidates
            last = at
    seen.planned += sum(map(len, found.values()))
    seen.anchors += sum(map(bool, found.values()))
    planned = {}  # root read -> (its plan or None, its forest's engine)

    def read(unread):
        forest = forest_of(roots=unread)
        engine = engine_of(forest)
        plans = forest.plans(groups)
        seen.planned += _most(plans)
        seen.anchors += len(plans)
        planned.update(dict.fromkeys(unread, (None, engine)))
        planned.update((plan.anchor, (plan, engine)) for plan in plans)

    if seen.whole and len(found) < len(roots):
        read(set(roots) - found.keys())  # all planned by the first candidate
    streamed = seen.streamed  # noted before each stream is given
    for at, root in enumerate(roots):
        candidates = found.get(root)
        if candidates is None:
            if root not in planned:
                end = last + 1 if at < last else len(roots)
                read({r for r in roots[at:end] if r not in found})
            plan, engine = planned[root]
            if plan is None:
                kept_answers.keep(root, usage[root], ())
                continue
            stream = engine.candidates(plan)
            first = tuple(itertools.islice(stream, kept.MOST_PER_ANCHOR + 1))
            if len(first) > kept.MOST_PER_ANCHOR:
                if streamed is not None:
                    streamed.append(root)
                yield itertools.chain(first, stream)
                continue
            candidates = kept_answers.keep(root, usage[root], first)
        if candidates:
            if streamed is not None:
                streamed.append(root)
            yield iter(candidates)


def _learn_first_page(found, roots, seen, limit):
    """Remember how many trees, in root id order, the answer of a limited
    search came from (all of them when it found fewer than its limit): the
    next request of its shape reads at least as many in its first page.
    When the first trees are full, as where schedulers pack hosts, the
    candidates lie further on with every claim, and each request would
    otherwise read them in several growing pages, a statement each.
    ``roots``: the root ids of the answer's trees."""
    every, answers = seen.paging
    if len(found) < limit:
        needed = len(every)
    else:
        needed = bisect.bisect_right(every, max(roots))
    answers.remember_trees_needed(needed)


def _one_provider_per_tree(candidate, seen):
    """Below 1.29 a nested deployment allows one provider per tree
    (doc/api.md "Combining groups")."""
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


def _bounded(search_, bound):
    """``search_()``'s (candidates, seen, ...) once they are known to be at
    most ``bound`` (AnswerTooLarge otherwise, before any of the answer is
    sent; 0: unbounded). The first KEPT candidates are kept. When more
    follow, the plans may already show that at most ``bound`` can (``seen.
    most()``); otherwise they are counted up to the bound by a second walk,
    in the same read transaction, that builds none. The answer then goes
    on from the kept ones: nothing is searched twice to be sent."""
    found, seen, *rest = search_()
    if not bound:
        return (found, seen, *rest)
    keep = min(KEPT, bound) + 1
    kept = list(itertools.islice(found, keep))
    if len(kept) < keep:
        return (iter(kept), seen, *rest)
    if keep > bound:
        raise _too_large(bound)
    most = seen.most()
    if most is None or most > bound:
        counted, *_ = search_(build=False)
        if sum(1 for _ in itertools.islice(counted, bound + 1)) > bound:
            raise _too_large(bound)
    return (itertools.chain(kept, found), seen, *rest)


def _too_large(bound):
    return exception.AnswerTooLarge(
        "The answer would hold more than %d allocation candidates, the most "
        "one answer may hold ([placement] max_answer_candidates): pass a "
        "'limit' of at most that many, or narrow the request." % bound
    )


class _Uuids(dict):
    """{provider id: uuid}: the providers outside ``summaries`` that are
    put in, the others' from their Summary when asked (the renderer asks
    for the allocated ones only: no pass over every summary)."""

    def __init__(self, summaries):
        super().__init__()
        self.summaries = summaries

    def __missing__(self, rp):
        return self.summaries[rp].uuid


def _summaries(
    index, found, seen, class_ids, allocated_only, allocated, mapped, roots=None
):
    """The Result of ``found``: ``allocated`` and ``mapped`` are the
    providers its candidates allocate from and map (``allocated`` may be
    None with ``roots``, the root ids of their trees)."""
    if roots is None:
        roots = seen.roots(allocated)
    class_names = {i: n for n, i in class_ids.items()}
    kept = (
        None
        if allocated_only
        else tree_summaries.of_trees(index, sorted(roots), seen.usage)
    )
    if kept is not None:
        summaries = {}
        for tree in kept:
            summaries.update(tree.summaries)
    else:
        summaries = providers.load_summaries(
            index,
            roots,
            seen.inventories(roots),
            seen.used(roots),
            class_names,
            allocated if allocated_only else None,
        )
    uuids = _Uuids(summaries)
    # Resourceless groups may map providers outside the summarised trees.
    if not mapped <= summaries.keys():
        uuids.update(index.uuids(mapped - summaries.keys()))
    return Result(found, summaries, uuids, class_names, kept)
