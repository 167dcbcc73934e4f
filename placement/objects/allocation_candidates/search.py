"""Stage 4: lazy combination search.

For each anchor's ``Plan`` a depth-first walk picks one option per slot,
checking every constraint as soon as the slots it depends on are filled:
consolidated capacity and max_unit (each pick), isolate (each suffixed
pick), the unsuffixed group's collective traits (its last slot) and each
``same_subtree`` constraint (its last group's slot). Nothing is
materialised: candidates stream out and the caller stops at its limit.

Every anchor of a request has the same slot layout (one slot per group,
one per class of a spread group), so what depends only on the layout is
worked out once per ``Search`` (``_Layout``), not once per anchor.
"""

import collections
import functools
import itertools
import math
import typing
from collections.abc import Callable
from collections.abc import Container
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence

from placement.objects.allocation_candidates.trees import Plan


class Candidate(typing.NamedTuple):
    """One allocation request, ids only."""

    # A tuple: built once per candidate, hundreds of thousands per request.
    allocations: tuple  # ((provider id, class id, amount), ...) sorted
    mappings: tuple  # ((suffix, (provider id, ...)), ...) sorted

    def providers(self) -> set[int]:
        return {rp for rp, _, _ in self.allocations}


class Kept(Candidate):
    """A Candidate kept for its tree across requests (``kept``): the same
    object while the tree's usage holds, so a streamed answer's renderer
    keeps its JSON by identity, as a limited answer's does for all."""

    __slots__ = ()


_new = tuple.__new__


class _Room(dict):
    """(provider, class) -> the largest consolidated amount that fits,
    computed on first use: ``fits_sum(amount)`` is ``amount <=
    min(capacity - used, max_unit)``, one number to compare with."""

    def __init__(self, inventories):
        super().__init__()
        self.inventories = inventories

    def __missing__(self, key):
        inventory = self.inventories[key]
        room = self[key] = min(inventory.capacity - inventory.used, inventory.max_unit)
        return room


class _Unbounded(dict):
    """A ``_Room`` that never runs out: consolidated sums not judged."""

    def __missing__(self, key):
        return math.inf


class _Ancestors(dict):
    """provider -> (provider, its parent, ..., its root), computed on first
    use: a same_subtree check looks a provider up in another's."""

    def __init__(self, providers):
        super().__init__()
        self.providers = providers

    def __missing__(self, rp):
        parent = self.providers[rp].parent_id
        found = self[rp] = (rp,) if parent is None else (rp, *self[parent])
        return found


def _one_subtree(ancestors: _Ancestors, rps: Sequence[int]) -> bool:
    """Some provider of ``rps`` is at or above all of them."""
    for top in rps:  # loops, not generators: called once per pick
        for rp in rps:
            if top not in ancestors[rp]:
                break
        else:
            return True
    return False


def _may_share(groups: Sequence[tuple[Sequence[int], bool]]) -> bool:
    """Some class is asked twice where one provider may serve both:
    ``groups`` are (classes asked, isolated) per group."""
    for j, (classes, isolated) in enumerate(groups):
        if len(set(classes)) != len(classes):
            return True
        for others, also_isolated in groups[j + 1 :]:
            if not (isolated and also_isolated) and not set(classes).isdisjoint(others):
                return True
    return False


class _Layout:
    """What a walk needs that depends on the slot layout, not the anchor."""

    def __init__(self, search, slots):
        groups = search.groups
        group_slots = collections.defaultdict(list)
        for i, slot in enumerate(slots):
            group_slots[slot.group].append(i)
        last_slot = {slot.group: i for i, slot in enumerate(slots) if slot.closes_group}
        # Per slot: (check, slot indexes) pairs judged once it is filled.
        self.checks = [[] for _ in slots]
        for i, slot in enumerate(slots):
            any_traits = groups[slot.group].any_traits
            if slot.closes_group and slot.spread and any_traits and search.traits:
                self.checks[i].append(
                    (search.traits_hold(any_traits), group_slots[slot.group])
                )
        for constraint in search.same_subtree:
            members = [last_slot[g] for g in constraint]
            self.checks[max(members)].append((search.one_subtree, members))
        # isolate: a suffixed group's provider serves no other one.
        self.isolating = [
            search.isolate and not groups[slot.group].spread for slot in slots
        ]
        self.isolated = [i for i, isolating in enumerate(self.isolating) if isolating]
        self.checked = [i for i, checks in enumerate(self.checks) if checks]
        # Each option fits alone, so only a pair two groups can both
        # allocate from needs its sum judged: none when no class is asked
        # by two slots that may pick one provider (a spread group's slots
        # are of different classes; isolated slots pick different ones).
        self.sums_pairs = _may_share(
            [
                ([rc for rc, _ in groups[g].resources], self.isolating[i])
                for g, indexes in group_slots.items()
                for i in indexes[-1:]
            ]
        )
        # A class asked by two groups, isolated or not: the anchor's
        # supply of it may fall short of the demand (Search._feasible).
        classes = [rc for g in group_slots for rc, _ in groups[g].resources]
        self.shares_classes = len(classes) != len(set(classes))
        # (suffix, its one slot or None, its slots) per group, by suffix.
        self.mappings = [
            (suffix, indexes[0] if len(indexes) == 1 else None, indexes)
            for suffix, indexes in sorted(
                (groups[g].suffix, indexes) for g, indexes in group_slots.items()
            )
        ]
        # Per slot: the place in the mappings of the group it closes (or
        # None).
        self.places: list[int | None] = [None] * len(slots)
        for place, (_, _, indexes) in enumerate(self.mappings):
            self.places[indexes[-1]] = place

    def pick(self, i, rp, allocations):
        """(the (provider, class, amount) triples, and the group's mapping
        when slot ``i`` is a one-slot group's, else None) of picking
        ``rp`` at slot ``i``: the walk sets them once per pick, not once
        per candidate."""
        place = self.places[i]
        mapping = None
        if place is not None and self.mappings[place][1] is not None:
            mapping = (self.mappings[place][0], (rp,))
        return (tuple([(rp, rc, n) for rc, n in allocations]), mapping)

    def spread_mapping(self, place, picked):
        """The mapping of the spread group at ``place``, once all its
        slots are picked."""
        suffix, _, indexes = self.mappings[place]
        rps = {picked[i] for i in indexes}
        return (suffix, (rps.pop(),) if len(rps) == 1 else tuple(sorted(rps)))

    def holds(self, i, picked):
        """The constraints judged at slot ``i`` hold for ``picked``."""
        for check, indexes in self.checks[i]:
            if not check([picked[j] for j in indexes]):
                return False
        return True

    def candidate(self, picked, amounts):
        # Sorting the (provider, class) keys, then making the triples, is
        # the cheaper order; tuple.__new__ skips the named tuple's Python
        # __new__. Both are per candidate, hundreds of thousands of times.
        return _new(
            Candidate,
            (
                tuple([(key[0], key[1], amounts[key]) for key in sorted(amounts)]),
                self.mapped(picked),
            ),
        )

    def unsummed(self, picked, chosen):
        """The candidate of ``picked`` when no two picks share a (provider,
        class): its allocations are the picks' own."""
        allocations = [
            (rp, rc, n)
            for rp, allocations in zip(picked, chosen)
            for rc, n in allocations
        ]
        allocations.sort()
        return _new(Candidate, (tuple(allocations), self.mapped(picked)))

    def mapped(self, picked):
        """The candidate's mappings: (suffix, providers) per group."""
        mapped = []
        for suffix, one, indexes in self.mappings:
            if one is not None:
                mapped.append((suffix, (picked[one],)))
            else:
                rps = {picked[i] for i in indexes}
                mapped.append(
                    (suffix, (rps.pop(),) if len(rps) == 1 else tuple(sorted(rps)))
                )
        return tuple(mapped)


class Search:
    """``sums`` False leaves out the consolidated capacity, and ``traits``
    False the unsuffixed group's traits, both judged on the combination as
    a whole: explain switches the constraints on one at a time. ``build``
    False walks without building candidates (None stands for each), to
    count them."""

    def __init__(
        self,
        trees,
        groups,
        same_subtree=(),
        isolate=False,
        sums=True,
        traits=True,
        build=True,
    ):
        self.trees = trees
        self.build = build
        self.snap = trees.snap
        self.groups = groups
        self.isolate = isolate
        self.sums = sums
        self.traits = traits
        index = {g.suffix: i for i, g in enumerate(groups)}
        self.same_subtree = [tuple(index[s] for s in c) for c in same_subtree]
        # A function of the ancestors alone, not a bound method: the
        # layouts keep it, and a Search they pointed back to would be a
        # cycle left, with its whole snapshot, for the cyclic collector.
        self.one_subtree = functools.partial(
            _one_subtree, _Ancestors(self.snap.providers)
        )
        self._layouts = {}
        # The walk meets each pair many times.
        self._room = _Room(self.snap.inventories) if sums else _Unbounded()

    def traits_hold(
        self, any_traits: Iterable[frozenset[int]]
    ) -> Callable[[Iterable[int]], bool]:
        """Check of a spread group's traits, judged on all its providers."""
        traits = self.trees.traits

        def check(rps):
            found = set().union(*[traits(rp) for rp in rps])
            return all(found & any_of for any_of in any_traits)

        return check

    def _feasible(self, options):
        """Cheap bound: each class's total demand fits the anchor's supply.

        Stops wide trees from being walked when, say, more single-unit
        groups are asked than there are free units under the anchor."""
        demand, supply, counted = {}, {}, set()
        inventories = self.snap.inventories
        for slot_options in options:
            # All options of a slot ask the same amounts.
            for rc, amount in slot_options[0][1]:
                demand[rc] = demand.get(rc, 0) + amount
            for rp, allocations in slot_options:
                for rc, _ in allocations:
                    if (rp, rc) not in counted:
                        counted.add((rp, rc))
                        inventory = inventories[rp, rc]
                        # Options fit on their own, so this is positive.
                        supply[rc] = (
                            supply.get(rc, 0) + inventory.capacity - inventory.used
                        )
        return all(supply[rc] >= amount for rc, amount in demand.items())

    def candidates(self, plan: Plan) -> Iterator[Candidate]:
        """Every valid combination for one anchor, lazily (an iterator)."""
        options = plan.options
        if not options:
            return iter(())
        layout = self._layouts.get(plan.slots)
        if layout is None:
            layout = self._layouts[plan.slots] = _Layout(self, plan.slots)
        if max(map(len, options)) == 1:
            return iter(self._only(options, layout))
        # The bound only pays off when there is a choice to prune, and can
        # only fail when slots share a class (each option fits alone).
        if self.sums and layout.shares_classes and not self._feasible(options):
            return iter(())
        return self._walk(options, layout, self.sums and layout.sums_pairs)

    def _only(self, options, layout):
        """The one combination of slots with one option each (flat
        requests: one slot per anchor), without the walk's machinery."""
        picked = [slot_options[0][0] for slot_options in options]
        chosen = [slot_options[0][1] for slot_options in options]
        if self.sums and layout.sums_pairs:
            amounts = {}
            for rp, allocations in zip(picked, chosen):
                for rc, n in allocations:
                    amounts[rp, rc] = amounts.get((rp, rc), 0) + n
            inventories = self.snap.inventories
            for key, amount in amounts.items():
                if not inventories[key].fits_sum(amount):
                    return ()
        isolated = [picked[i] for i in layout.isolated]
        if len(set(isolated)) != len(isolated):
            return ()
        for i in layout.checked:
            if not layout.holds(i, picked):
                return ()
        if self.sums and layout.sums_pairs:
            return (layout.candidate(picked, amounts),)
        return (layout.unsummed(picked, chosen),)

    def _walk(self, options, layout, summed):
        """Depth-first over the slots with an explicit stack (one iterator
        per slot): no generator per level, and no self-referencing closure
        left for the cyclic collector per anchor. A candidate is made of
        what each pick set once: its (provider, class, amount) triples and,
        where it closes a group, the group's mapping."""
        holds, checks, isolating = layout.holds, layout.checks, layout.isolating
        places = layout.places
        # Per slot, {provider: layout.pick()}, kept for this anchor's walk
        # (every option of a slot asks the same amounts): memory follows
        # one tree's providers.
        picks = [{} for _ in options]
        build = self.build
        room = self._room
        amounts = {}  # (rp, rc) -> summed amount, when summed
        picked = [None] * len(options)  # provider per slot
        chosen = [()] * len(options)  # its allocations per slot
        triples = [()] * len(options)  # its (rp, rc, amount) per slot
        mapped = [None] * len(layout.mappings)  # (suffix, providers) per group
        remaining = [iter(options[0])] + [iter(())] * (len(options) - 1)
        isolated = set()  # providers of suffixed groups
        last = len(options) - 1
        # The last slot's options taken in one loop (``_last_picks``) where
        # nothing but isolation is judged at it: a wide tree's candidates
        # mostly differ only there (a group of one of its many devices).
        quick = last if self._quick_last(layout, summed) else -1
        i = 0
        while True:
            option = next(remaining[i], None)
            if option is None:
                # Slot exhausted: back to the slot before, undoing its pick.
                picked[i] = None
                if i == 0:
                    return
                i -= 1
                if summed:
                    _subtract(amounts, picked[i], chosen[i])
                if isolating[i]:
                    isolated.discard(picked[i])
                continue
            rp, allocations = option
            if isolating[i] and rp in isolated:
                continue
            if summed:
                # Add the pick's amounts, then judge the sums.
                fits = True
                for rc, n in allocations:
                    key = (rp, rc)
                    amount = amounts[key] = amounts.get(key, 0) + n
                    if amount > room[key]:
                        fits = False
                if not fits:
                    _subtract(amounts, rp, allocations)
                    continue
            picked[i], chosen[i] = rp, allocations
            if checks[i] and not holds(i, picked):
                if summed:
                    _subtract(amounts, rp, allocations)
                continue
            if build:
                known = picks[i].get(rp)
                if known is None:
                    known = picks[i][rp] = layout.pick(i, rp, allocations)
                triples[i], mapping = known
                if mapping is not None:
                    mapped[places[i]] = mapping
                elif places[i] is not None:
                    mapped[places[i]] = layout.spread_mapping(places[i], picked)
            if i < last:
                if isolating[i]:
                    isolated.add(rp)
                if i + 1 == quick:
                    yield from _last_picks(
                        options[quick], layout, picks[quick], triples, mapped, isolated
                    )
                    if isolating[i]:
                        isolated.discard(rp)
                    continue
                i += 1
                remaining[i] = iter(options[i])
                continue
            if not build:
                yield None
            elif summed:
                yield _new(
                    Candidate,
                    (
                        tuple([(k[0], k[1], amounts[k]) for k in sorted(amounts)]),
                        tuple(mapped),
                    ),
                )
            else:
                # No two picks share a (provider, class): the candidate's
                # allocations are the picks' own.
                # (Adding the few small tuples beats chaining them.)
                yield _new(Candidate, (tuple(sorted(sum(triples, ()))), tuple(mapped)))
            if summed:
                _subtract(amounts, rp, allocations)

    def _quick_last(self, layout, summed):
        """Whether ``_walk`` may take its last slot's options in one loop
        (``_last_picks``): candidates built, no sums, no check judged at
        that slot, and it is a one-slot group's (its mapping its pick's)."""
        last = len(layout.isolating) - 1
        place = layout.places[last]
        return (
            self.build
            and last > 0
            and not summed
            and not layout.checks[last]
            and place is not None
            and layout.mappings[place][1] is not None
        )


def _last_picks(options, layout, picks, triples, mapped, isolated):
    """The candidates of every option of the last slot (``options``), the
    slots before it picked (their ``triples``, the groups' ``mapped``):
    what ``Search._walk`` yields for them, one loop."""
    last = len(triples) - 1
    prefix = sum(triples[:last], ())
    place = layout.places[last]
    suffix = layout.mappings[place][0]
    isolating = layout.isolating[last]
    for rp, allocations in options:
        if isolating and rp in isolated:
            continue
        # ``layout.pick``'s, inline: a call per candidate is much of its
        # cost here.
        known = picks.get(rp)
        if known is None:
            known = picks[rp] = tuple([(rp, rc, n) for rc, n in allocations])
        mapped[place] = (suffix, (rp,))
        yield _new(Candidate, (tuple(sorted(prefix + known)), tuple(mapped)))


def _subtract(amounts, rp, allocations):
    """Take one pick's amounts out of ``amounts``: only allocated pairs
    stay in it."""
    for rc, n in allocations:
        key = (rp, rc)
        if amounts[key] == n:
            del amounts[key]
        else:
            amounts[key] -= n


def depth_first(streams: Iterable[Iterator[Candidate]]) -> Iterator[Candidate]:
    return itertools.chain.from_iterable(streams)


def breadth_first(streams: Iterable[Iterator[Candidate]]) -> Iterator[Candidate]:
    """One candidate per anchor in turn until every anchor is exhausted.

    Anchors join the first round as it reaches them: a limit met within
    that round never builds the later anchors' plans."""
    active: collections.deque[Iterator[Candidate]] = collections.deque()
    for stream in streams:
        for candidate in stream:
            yield candidate
            active.append(stream)
            break
    while active:
        stream = active.popleft()
        for candidate in stream:
            yield candidate
            active.append(stream)
            break


STRATEGIES = {"depth-first": depth_first, "breadth-first": breadth_first}


# Candidates ``unique`` remembers at most (about 1.3 KB each with six
# groups): past them the answer ends, as at max_allocation_candidates.
MAX_REMEMBERED = 100_000


def unique(
    candidates: Iterable[Candidate],
    sharing: Container[int],
    most: int = MAX_REMEMBERED,
) -> Iterator[Candidate]:
    """Drop repeats: same allocations and same mappings (doc/api.md
    "Combining groups").

    Anchors are roots, and a provider that is not sharing (not in
    ``sharing``) is under its own root's anchor only; within an anchor no
    candidate repeats. So only a candidate made wholly of sharing
    providers can repeat, and only those are remembered: memory follows
    them, not all candidates. After ``most`` of them the candidates end.
    """
    seen: set[Candidate] = set()
    for candidate in candidates:
        if any(rp not in sharing for rp, _, _ in candidate.allocations) or any(
            rp not in sharing for _, rps in candidate.mappings for rp in rps
        ):
            yield candidate
        elif candidate not in seen:
            if len(seen) == most:
                return
            seen.add(candidate)
            yield candidate
