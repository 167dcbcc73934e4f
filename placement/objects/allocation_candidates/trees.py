"""Stage 3: which providers can serve which group, under which anchor.

Works on a ``providers.Snapshot`` (ids only). A suffixed group is served by
exactly one provider; the unsuffixed group is "spread": one provider
per requested class, any of the anchor's tree or a sharing provider serving
it (doc/api.md "Request groups"). The result is a ``Plan`` per anchor: an
ordered list of slots, each slot a list of options ``(provider id,
((class id, amount), ...))``.
"""

import collections
import dataclasses
import functools
import typing
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class Group:
    """A request group with names resolved to ids."""

    suffix: str
    resources: tuple  # ((class id, amount), ...)
    any_traits: tuple = ()  # (frozenset of trait ids, ...)
    forbidden_traits: frozenset = frozenset()
    any_aggregates: tuple = ()  # (frozenset of aggregate ids, ...)
    forbidden_aggregates: frozenset = frozenset()
    in_tree_root: int | None = None

    @property
    def spread(self) -> bool:
        return self.suffix == ""


class Slot(typing.NamedTuple):
    group: int  # index into the request's groups
    closes_group: bool  # the group's last slot
    spread: bool = False  # one of the group's per-class slots:
    # traits are judged on all of them


class Plan(typing.NamedTuple):
    anchor: int
    slots: tuple  # Slot per slot: one tuple shared by
    # every anchor of the request
    options: tuple  # per slot: ((provider id, allocations),
    # ...)


# A filter: keeps a provider id or not.
Keep = Callable[[int], bool]
# One way a provider serves a slot: (provider id, ((class id, amount), ...)).
Option = tuple[int, tuple]


def _capacity_filter(inventories, rc, amount):
    """Has inventory of ``rc`` where ``amount`` fits (reserved, ratio,
    min/max unit, step size, usage)."""

    def keep(rp):
        inventory = inventories.get((rp, rc))
        return inventory is not None and inventory.fits(amount)

    return keep


def _capacity_last(named_filter: tuple[object, Keep]) -> bool:
    name, _ = named_filter
    return isinstance(name, tuple) and name[0] == "capacity"


def _in_aggregates(aggs, group):
    return (
        all(aggs & any_of for any_of in group.any_aggregates)
        and not aggs & group.forbidden_aggregates
    )


def _inverted(by_provider: Mapping[int, frozenset[int]]) -> dict[int, set[int]]:
    into: dict[int, set[int]] = collections.defaultdict(set)
    for rp, values in by_provider.items():
        for value in values:
            into[value].add(rp)
    return into


def _having_any(holders: Mapping[int, set[int]], values: Iterable[int]) -> set[int]:
    """The providers with some of ``values``."""
    return set().union(*[holders.get(v, ()) for v in values])


def _having_one_of_each(
    holders: Mapping[int, set[int]], any_of: Sequence[frozenset[int]]
) -> set[int]:
    """The providers with at least one value of each set of ``any_of``."""
    return set.intersection(*[_having_any(holders, s) for s in any_of])


class Trees:
    """Per-group candidates over one snapshot."""

    # Explain sets it: called with (group, filter name, what is left).
    observe = None

    def __init__(
        self,
        snapshot,
        root_required=frozenset(),
        root_forbidden=frozenset(),
        roots=None,
    ):
        """``roots``: only the trees of these roots are anchors (None: all
        of the snapshot's)."""
        self.snap = snapshot
        providers = snapshot.providers
        self.holders = collections.defaultdict(list)  # class id -> providers
        if roots is None:
            for rp, rc in snapshot.inventories:
                self.holders[rc].append(rp)
        else:
            for rp, rc in snapshot.inventories:
                if providers[rp].root_id in roots:
                    self.holders[rc].append(rp)
        for holders in self.holders.values():
            holders.sort()
        self.anchor_ok = {
            rp
            for rp, p in providers.items()
            if p.parent_id is None and (roots is None or rp in roots)
        }
        if root_required or root_forbidden:
            self.anchor_ok = {
                rp
                for rp in self.anchor_ok
                if root_required <= self.traits(rp)
                and not root_forbidden & self.traits(rp)
            }

    def holding(self, resources: tuple) -> set[int]:
        """The providers with inventory of every class of ``resources``."""
        (first, _), *others = resources
        return set(self.holders.get(first, ())).intersection(
            *[self.holders.get(rc, ()) for rc, _ in others]
        )

    def traits(self, rp: int) -> frozenset[int]:
        return self.snap.traits.get(rp, frozenset())

    def aggregates(self, rp: int) -> frozenset[int]:
        return self.snap.aggregates.get(rp, frozenset())

    def root(self, rp: int) -> int:
        return self.snap.providers[rp].root_id

    def anchors_of(self, rp: int) -> Iterable[int]:
        """The roots under which provider ``rp`` may be offered."""
        root = self.snap.providers[rp].root_id
        if rp not in self.snap.serves:  # most providers: no set work
            return (root,) if root in self.anchor_ok else ()
        return ({root} | self.snap.serves[rp]) & self.anchor_ok

    def filters(self, group: Group) -> list[tuple[object, Keep]]:
        """The ordered (name, keep) filters of a group served by one
        provider (doc/api.md "Request groups"), each only if the group
        asks for it; ``keep`` takes a provider id. Explain counts what
        each one leaves."""
        inventories = self.snap.inventories
        found: list[tuple[object, Keep]] = []
        if group.in_tree_root is not None and group.resources:
            root = group.in_tree_root
            found.append(("in_tree", lambda rp: self.root(rp) == root))
        if len(group.resources) > 1:
            found.append(("resources", self.holding(group.resources).__contains__))
        for rc, amount in group.resources:
            found.append((("capacity", rc), _capacity_filter(inventories, rc, amount)))
        # Trait and aggregate filters are set lookups: a test per provider
        # would be a Python call each.
        by_trait = self.trait_holders
        required = [s for s in group.any_traits if len(s) == 1]
        if required:
            found.append(
                ("required", _having_one_of_each(by_trait, required).__contains__)
            )
        any_of = [s for s in group.any_traits if len(s) > 1]
        if any_of:
            found.append(("any_of", _having_one_of_each(by_trait, any_of).__contains__))
        if group.forbidden_traits:
            bad = _having_any(by_trait, group.forbidden_traits)
            found.append(("forbidden", lambda rp: rp not in bad))
        if group.any_aggregates or group.forbidden_aggregates:
            by_aggregate = self.aggregate_members
            bad = _having_any(by_aggregate, group.forbidden_aggregates)
            if group.any_aggregates:
                good = _having_one_of_each(by_aggregate, group.any_aggregates)
                found.append(("member_of", (good - bad).__contains__))
            else:
                found.append(("member_of", lambda rp: rp not in bad))
        return found

    @functools.cached_property
    def trait_holders(self) -> dict[int, set[int]]:
        """{trait: providers} of the snapshot's traits."""
        return _inverted(self.snap.traits)

    @functools.cached_property
    def aggregate_members(self) -> dict[int, set[int]]:
        """{aggregate: providers} of the snapshot's aggregates."""
        return _inverted(self.snap.aggregates)

    def starts(self, group: Group) -> Sequence[int]:
        """The providers a one-provider group's filters start from."""
        if group.resources:
            return self.holders.get(group.resources[0][0], ())
        if group.any_traits or group.any_aggregates:
            # Resourceless: upstream needs a positive filter and ignores
            # in_tree for these groups.
            return sorted(self.snap.providers)
        return []

    def single(self, group: Group) -> dict[int, list[Option]]:
        """{anchor: [option]} for a group served by one provider (doc/api.md
        "Request groups")."""
        candidates = self.starts(group)
        if self.observe is not None:
            first = ("resources", group.resources[0][0]) if group.resources else "all"
            self.observe(group, first, candidates)
        filters = self.filters(group)
        if self.observe is None:
            # Unobserved, only what passes them all counts: the set lookups
            # first, the capacity checks on what they leave.
            filters.sort(key=_capacity_last)
        for name, keep in filters:
            candidates = [rp for rp in candidates if keep(rp)]
            if self.observe is not None:
                self.observe(group, name, candidates)
        by_anchor = collections.defaultdict(list)
        option = group.resources
        if self.snap.serves:
            for rp in candidates:
                for anchor in self.anchors_of(rp):
                    by_anchor[anchor].append((rp, option))
        else:
            # ``anchors_of`` without sharing providers, inline: each
            # provider's root, if an anchor (a call per provider is much of
            # a wide tree's planning).
            providers, anchor_ok = self.snap.providers, self.anchor_ok
            for rp in candidates:
                root = providers[rp].root_id
                if root in anchor_ok:
                    by_anchor[root].append((rp, option))
        if self.observe is not None:
            self.observe(group, "trees", by_anchor)
        return by_anchor

    def spread_filters(
        self, group: Group, rc: int, amount: int
    ) -> list[tuple[object, Keep]]:
        """The ordered (name, keep) filters of one class's providers of
        the unsuffixed group (doc/api.md "Request groups")."""
        found: list[tuple[object, Keep]] = [
            (("capacity", rc), _capacity_filter(self.snap.inventories, rc, amount))
        ]
        if group.forbidden_traits:
            bad = _having_any(self.trait_holders, group.forbidden_traits)
            found.append(("forbidden", lambda rp: rp not in bad))
        return found

    def spread(self, group: Group) -> dict[int, list[list[Option]]]:
        """{anchor: [[option] per class]} for the unsuffixed group."""
        if not group.resources:
            return {}
        per_class = []
        # No in_tree, sharing provider or member_of: a provider serves
        # under its own root alone.
        plain = not (
            group.in_tree_root is not None
            or self.snap.serves
            or group.any_aggregates
            or group.forbidden_aggregates
        )
        providers, anchor_ok = self.snap.providers, self.anchor_ok
        for rc, amount in group.resources:
            candidates = self.holders.get(rc, ())
            if self.observe is not None:
                self.observe(group, ("resources", rc), candidates)
            for name, keep in self.spread_filters(group, rc, amount):
                candidates = [rp for rp in candidates if keep(rp)]
                if self.observe is not None:
                    self.observe(group, name, candidates)
            if self.observe is not None:
                self._observe_anchoring(group, candidates)
            pairs = collections.defaultdict(list)
            option = ((rc, amount),)
            if plain:
                # ``spread_anchors``, inline: each provider's root, if an
                # anchor.
                for rp in candidates:
                    root = providers[rp].root_id
                    if root in anchor_ok:
                        pairs[root].append((rp, option))
            else:
                for rp in candidates:
                    for anchor in self.spread_anchors(rp, group):
                        pairs[anchor].append((rp, option))
            per_class.append(pairs)
        anchors = set.intersection(*(set(p) for p in per_class))
        if self.observe is not None:
            self.observe(group, "trees", anchors)
        return {a: [pairs[a] for pairs in per_class] for a in anchors}

    def _observe_anchoring(self, group: Group, candidates: list[int]) -> None:
        """Explain's counts of the unsuffixed group's per-tree rules: the
        providers left with a tree to serve under ``in_tree``, then under
        ``member_of`` (judged on the provider's and its tree's aggregates
        together)."""
        assert self.observe is not None
        if group.in_tree_root is not None:
            candidates = [
                rp
                for rp in candidates
                if self.spread_anchors(rp, group, aggregates=False)
            ]
            self.observe(group, "in_tree", candidates)
        if group.any_aggregates or group.forbidden_aggregates:
            candidates = [rp for rp in candidates if self.spread_anchors(rp, group)]
            self.observe(group, "member_of", candidates)

    def spread_anchors(
        self, rp: int, group: Group, aggregates: bool = True
    ) -> Sequence[int]:
        """The anchors whose candidates provider ``rp`` may serve the
        unsuffixed group in (``aggregates`` False: before member_of)."""
        own_root = self.root(rp)
        anchors: Iterable[int]
        if group.in_tree_root is not None:
            anchors = (own_root,) if own_root == group.in_tree_root else ()
        # A sharing provider must itself be in the member_of sets.
        elif rp in self.snap.serves and all(
            self.aggregates(rp) & any_of for any_of in group.any_aggregates
        ):
            anchors = {own_root} | self.snap.serves[rp]
        else:
            anchors = (own_root,)
        anchors = [a for a in anchors if a in self.anchor_ok]
        if not aggregates or not (group.any_aggregates or group.forbidden_aggregates):
            return anchors
        mine = self.aggregates(rp)
        return [a for a in anchors if _in_aggregates(mine | self.aggregates(a), group)]

    def plans(self, groups: Sequence[Group]) -> list[Plan]:
        """A Plan for every anchor with a result for every group."""
        # Without trees or sharing every anchor is a lone provider: spreading
        # the unsuffixed group is the same as one provider serving it all
        # (a flat deployment without sharing), with one slot instead of one
        # per class.
        lone = not (self.snap.nested or self.snap.serves)
        spreads = [g.spread and not (lone and g.resources) for g in groups]
        per_group = [
            self.spread(g) if spread else self.single(g)
            for g, spread in zip(groups, spreads)
        ]
        if not per_group:
            return []
        slot_list: list[Slot] = []
        for index, (group, spread) in enumerate(zip(groups, spreads)):
            count = len(group.resources) if spread else 1
            slot_list.extend(Slot(index, i == count - 1, spread) for i in range(count))
        slots = tuple(slot_list)
        anchors = set.intersection(*(set(c) for c in per_group))
        plans = []
        for anchor in sorted(anchors):
            options: list[tuple] = []
            for found, spread in zip(per_group, spreads):
                if spread:
                    options.extend(tuple(slot) for slot in found[anchor])
                else:
                    options.append(tuple(found[anchor]))
            plans.append(Plan(anchor, slots, tuple(options)))
        return plans
