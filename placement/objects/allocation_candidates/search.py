"""Stage 4: lazy combination search.

For each anchor's ``Plan`` a depth-first walk picks one option per slot,
checking every constraint as soon as the slots it depends on are filled:
consolidated capacity and max_unit (each pick), isolate (each suffixed
pick), the unsuffixed group's collective traits (its last slot) and each
``same_subtree`` constraint (its last group's slot). Nothing is
materialised: candidates stream out and the caller stops at its limit.
"""
import collections
import dataclasses
import itertools


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One allocation request, ids only."""
    allocations: tuple      # ((provider id, class id, amount), ...) sorted
    mappings: tuple         # ((suffix, (provider id, ...)), ...) sorted

    def providers(self):
        return {rp for rp, _, _ in self.allocations}


class Search:
    def __init__(self, trees, groups, same_subtree=(), isolate=False):
        self.trees = trees
        self.snap = trees.snap
        self.groups = groups
        self.isolate = isolate
        index = {g.suffix: i for i, g in enumerate(groups)}
        self.same_subtree = [tuple(index[s] for s in c) for c in same_subtree]
        self._ancestors = {}

    def ancestors(self, rp):
        """``rp`` and every provider above it."""
        if rp not in self._ancestors:
            parent = self.snap.providers[rp].parent_id
            self._ancestors[rp] = ({rp} | self.ancestors(parent)
                                   if parent is not None else {rp})
        return self._ancestors[rp]

    def _one_subtree(self, rps):
        return any(all(top in self.ancestors(rp) for rp in rps)
                   for top in rps)

    def _feasible(self, plan):
        """Cheap bound: each class's total demand fits the anchor's supply.

        Stops wide trees from being walked when, say, more single-unit
        groups are asked than there are free units under the anchor."""
        demand = collections.Counter()
        holders = collections.defaultdict(set)
        for slot in plan.slots:
            # All options of a slot ask the same amounts.
            for rc, amount in slot.options[0][1]:
                demand[rc] += amount
            for rp, allocations in slot.options:
                for rc, _ in allocations:
                    holders[rc].add(rp)
        inventories = self.snap.inventories
        return all(sum(inventories[rp, rc].capacity - inventories[rp, rc].used
                       for rp in holders[rc]) >= demand[rc]
                   for rc in demand)

    def candidates(self, plan):
        """Every valid combination for one anchor, lazily."""
        # The bound only pays off when there is a choice to prune; with one
        # option per slot the walk's own checks are cheaper.
        if (any(len(slot.options) > 1 for slot in plan.slots)
                and not self._feasible(plan)):
            return
        slots = plan.slots
        groups = self.groups
        inventories = self.snap.inventories
        amounts = {}                             # (rp, rc) -> summed amount
        picked = [None] * len(slots)             # provider per slot
        isolated = set()                         # providers of suffixed groups
        # same_subtree constraints checked once their last group is placed.
        last_slot = {}
        for i, slot in enumerate(slots):
            if slot.closes_group:
                last_slot[slot.group] = i
        checks_at = collections.defaultdict(list)
        for constraint in self.same_subtree:
            checks_at[max(last_slot[g] for g in constraint)].append(constraint)
        group_slots = collections.defaultdict(list)
        for i, slot in enumerate(slots):
            group_slots[slot.group].append(i)

        def group_providers(g):
            return {picked[i] for i in group_slots[g]}

        def constraints_hold(i, slot):
            group = groups[slot.group]
            if slot.closes_group and slot.spread and group.any_traits:
                traits = set().union(*(self.trees.traits(rp)
                                       for rp in group_providers(slot.group)))
                if not all(traits & any_of for any_of in group.any_traits):
                    return False
            return all(self._one_subtree([picked[last_slot[g]]
                                          for g in constraint])
                       for constraint in checks_at.get(i, ()))

        # Per slot: whether a constraint must be checked once it is filled.
        checked = [bool(checks_at.get(i)) or (
            slot.closes_group and slot.spread
            and bool(groups[slot.group].any_traits))
            for i, slot in enumerate(slots)]
        suffixes = [groups[slot.group].suffix for slot in slots]
        last = len(slots) - 1

        def candidate():
            mappings = {}
            for suffix, rp in zip(suffixes, picked):
                if suffix in mappings:
                    mappings[suffix].add(rp)
                else:
                    mappings[suffix] = {rp}
            return Candidate(
                tuple(sorted([(rp, rc, n) for (rp, rc), n in amounts.items()])),
                tuple(sorted([(s, tuple(sorted(rps)))
                              for s, rps in mappings.items()])))

        def walk(i):
            slot = slots[i]
            # isolate: a suffixed group's provider serves no other one.
            isolating = self.isolate and not groups[slot.group].spread
            for rp, allocations in slot.options:
                if isolating and rp in isolated:
                    continue
                if not all(inventories[rp, rc].fits_sum(
                        amounts.get((rp, rc), 0) + n) for rc, n in allocations):
                    continue
                picked[i] = rp
                for rc, n in allocations:
                    amounts[rp, rc] = amounts.get((rp, rc), 0) + n
                if isolating:
                    isolated.add(rp)
                if not checked[i] or constraints_hold(i, slot):
                    if i == last:
                        yield candidate()
                    else:
                        yield from walk(i + 1)
                if isolating:
                    isolated.discard(rp)
                for rc, n in allocations:
                    # Only allocated pairs stay in ``amounts``.
                    if amounts[rp, rc] == n:
                        del amounts[rp, rc]
                    else:
                        amounts[rp, rc] -= n
            picked[i] = None

        if slots:
            yield from walk(0)


def depth_first(streams):
    return itertools.chain.from_iterable(streams)


def breadth_first(streams):
    """One candidate per anchor in turn until every anchor is exhausted.

    Anchors join the first round as it reaches them: a limit met within
    that round never builds the later anchors' plans."""
    active = collections.deque()
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


def unique(candidates):
    """Drop repeats: same allocations and same mappings (§5.6)."""
    seen = set()
    for candidate in candidates:
        if candidate not in seen:
            seen.add(candidate)
            yield candidate
